"""Multi-stage RL through the real pipeline: per-stage pools, samplers, budgets, resets and boundaries."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from tracerl.config import load_recipe
from tracerl.errors import UserError
from tracerl.store import RunDir
from tracerl.train.checkpoint import load_trainer_state
from tracerl.run.pipeline import run_recipe
from tracerl.run.stages import rl_stages

STAGES = ('rl.stages=[{name: warm, steps: 2}, {name: hard, steps: 2, group_size: 2, max_new_tokens: 16, '
          'reset_optimizer: true, reset_reference: true, tasks: {sampler: {kind: curriculum}, '
          'profile: {tasks: 8, attempts: 2}}}]')


def _recipe(run_dir, *extra):
    return load_recipe("smoke", [f"run.dir={run_dir}", "env.name=parity", STAGES, "rl.algorithm.kl.coef=0.05", "rl.checkpoint_every=1",
                                 "stages=[sft, rl]", "rl.truncation=keep", "rl.minibatches=1", "rl.group_size=4", *extra])


def test_stage_settings_inherit_from_the_previous_stage():
    r = load_recipe("smoke", ['rl.stages=[{name: a, steps: 3, group_size: 2, max_tokens: 128}, {name: b, steps: 1}]'])
    a, b = rl_stages(r)
    assert r.rl.steps == 4 and (a.start, a.end, b.start, b.end) == (0, 3, 3, 4)
    assert b.recipe.rl.group_size == 2 and b.recipe.env.max_tokens == 128  # inherited
    assert b.recipe.rl.prompts_per_step == r.rl.prompts_per_step
    assert [(s.env, s.split) for s in b.tasks.sources] == [("math_tool", "train"), ("math_tool", "heldout")]
    (only,) = rl_stages(load_recipe("smoke"))
    assert (only.name, only.start, only.end) == ("rl", 0, 2)


@pytest.mark.parametrize("items, needle", [
    (['rl.stages=[{name: a, steps: 0}]'], "greater than or equal to 1"),
    (['rl.stages=[{name: a, steps: 2}, {name: a, steps: 1}]'], "unique"),
])
def test_bad_stage_lists_are_refused(items, needle):
    with pytest.raises(UserError, match=needle):
        load_recipe("smoke", items)


@pytest.fixture(scope="module")
def staged_run(tmp_path_factory, parity_env):
    run_dir = tmp_path_factory.mktemp("staged") / "run"
    run_recipe(_recipe(run_dir))
    return run_dir


def test_stage_boundaries_pools_and_budgets_are_recorded(staged_run):
    run = RunDir(staged_run)
    events = run.store.events("rl_stage")
    assert [(e["step"], e["payload"]["name"], e["payload"]["group_size"]) for e in events] == [
        (0, "warm", 4), (2, "hard", 2)]
    assert events[1]["payload"]["profiled_tasks"] == 8 and events[1]["payload"]["train_tasks"] == 8
    assert run.store.count("profile") == 8 * 2  # 8 tasks x 2 attempts, stored as evidence
    rows = [json.loads(line) for line in (staged_run / "metrics.jsonl").read_text().splitlines()]
    rl_rows = [r for r in rows if "rl/stage" in r]
    assert [r["rl/stage"] for r in rl_rows] == [0, 0, 1, 1]
    assert all("tasks/curriculum_mean" in r for r in rl_rows[2:]) and "tasks/curriculum_mean" not in rl_rows[0]
    for step, n in ((1, 16), (2, 16), (3, 8), (4, 8)):  # steps 1..N, as logged  # prompts_per_step 4 x group size 4, then 2
        assert len(list(run.store.trajectories(stage="rl", step=step))) == n
    profile = json.loads((staged_run / "profiles" / "hard.json").read_text())
    assert len(profile["tasks"]) == 8 and all(v["attempts"] == 2 for v in profile["tasks"].values())
    hard_ids = set(profile["tasks"])
    assert all(t.task_id in hard_ids for step in (3, 4) for t in run.store.trajectories(stage="rl", step=step))
    assert all(t.num_action_tokens <= 16 * 3 for t in run.store.trajectories(stage="rl", step=4))
    run.close()


def test_reset_optimizer_and_reference_at_the_boundary(staged_run):
    ck = staged_run / "checkpoints"
    # kl_coef > 0 and truncation=keep put every row in the update: one AdamW step per RL step (minibatches=1)
    adam_steps = {s: int(next(iter(load_trainer_state(ck / f"step_{s}")["roles_state"]["policy"]["optimizer"]["state"].values()))["step"])
                  for s in (1, 2, 3, 4)}
    assert adam_steps == {1: 1, 2: 2, 3: 1, 4: 2}
    ref3 = load_file(ck / "step_3" / "reference.safetensors")
    policy2 = load_file(ck / "step_2" / "model.safetensors")
    ref2 = load_file(ck / "step_2" / "reference.safetensors")
    shared = [k for k in ref3 if k in policy2]
    assert shared and all(torch.equal(ref3[k], policy2[k]) for k in shared)  # the policy at the stage start
    assert any(not torch.equal(ref2[k], ref3[k]) for k in shared)


def test_resume_inside_a_later_stage_repeats_the_same_steps(staged_run, tmp_path, parity_env):
    copy_dir = tmp_path / "copy"
    shutil.copytree(staged_run, copy_dir)
    shutil.rmtree(copy_dir / "checkpoints" / "step_4")
    run_recipe(_recipe(copy_dir), resume=copy_dir)
    run = RunDir(copy_dir)
    again = [t.token_ids for t in run.store.trajectories(stage="rl", step=4)]
    straight = RunDir(staged_run)
    first = [t.token_ids for t in straight.store.trajectories(stage="rl", step=4)]
    straight.close()
    # the resume rolled the store back to step_3's marks: the redone step replaced the straight run's
    assert len(again) == 8 and again == first
    assert run.store.count("profile") == 16  # the saved profile was reused, not sampled again
    run.close()
    a = load_file(staged_run / "checkpoints" / "step_4" / "model.safetensors")
    b = load_file(copy_dir / "checkpoints" / "step_4" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_mixture_of_a_task_file_and_a_generator_through_the_trainer(tmp_path, parity_env, caplog):
    rows = [{"id": f"f{i}", "prompt": f"Say something about item number {i}.", "answer": "1"} for i in range(5)]
    rows.append({"id": "dup", "prompt": rows[0]["prompt"], "answer": "1"})  # planted exact duplicate
    rows.append({"id": "bad", "answer": "1"})  # planted bad row: no prompt
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the generator comes first: SFT demonstrations are the expert's, on the first training tasks
    tasks = ('tasks={sources: [{env: parity, name: gen, n: 40}, {path: %s, license: cc0}, '
             '{env: parity, name: gen_heldout, split: heldout, n: 8, seed: 1}], filters: {exact_duplicates: true}, '
             'sampler: {kind: mixture, weights: {mine: 0.25, gen: 0.75}}}' % path)
    run_dir = tmp_path / "run"
    run_recipe(load_recipe("smoke", [f"run.dir={run_dir}", "env.name=parity", tasks, "stages=[sft, rl]",
                                     "rl.steps=3", "sft.demos=8"]))
    # the stage reuses the sources the run loaded: each bad row is reported once
    assert sum("bad task row" in r.getMessage() for r in caplog.records) == 1
    manifest = json.loads((run_dir / "manifest.json").read_text())["tasks"]["pool"]
    assert manifest["num_bad_rows"] == 1 and manifest["discarded"] == {"exact_duplicate": 1}
    assert [s["name"] for s in manifest["sources"]] == ["gen", "mine", "gen_heldout"]
    (ledger,) = [json.loads(line) for line in (run_dir / "tasks_ledger.jsonl").read_text().splitlines()]
    assert (ledger["stage"], ledger["task_id"], ledger["filter"]) == ("rl", "dup", "exact_duplicate")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "tasks/share/mine" in r][-1]
    # 3 steps x 4 prompts = 12 draws: exactly 3 from the file and 9 from the generator
    assert (last["tasks/share/mine"], last["tasks/target/mine"]) == (0.25, 0.25)
    assert (last["tasks/share/gen"], last["tasks/target/gen"]) == (0.75, 0.75)
    run = RunDir(run_dir)
    drawn = {t.task_id for t in run.store.trajectories(stage="rl")}
    run.close()
    assert len({d for d in drawn if d.startswith("f")}) == 3 and "dup" not in drawn


def test_reprofiling_drops_tasks_that_became_all_pass(tmp_path, parity_env):
    stages = ('rl.stages=[{name: a, steps: 1}, {name: b, steps: 2, tasks: {profile: '
              '{tasks: 24, attempts: 2, reprofile_each_stage: true}}}]')
    run_dir = tmp_path / "run"
    run_recipe(load_recipe("smoke", [f"run.dir={run_dir}", "env.name=parity", stages, "stages=[sft, rl]"]))
    profile = json.loads((run_dir / "profiles" / "b.json").read_text())["tasks"]
    solved = {tid for tid, v in profile.items() if v["successes"] == v["attempts"]}
    ledger = [json.loads(line) for line in (run_dir / "tasks_ledger.jsonl").read_text().splitlines()]
    assert solved and {r["task_id"] for r in ledger} == solved  # the planted signal: reward is parity of length
    assert all((r["stage"], r["filter"]) == ("b", "all_pass") for r in ledger)
    assert not (run_dir / "profiles" / "a.json").exists()  # the first stage needs no profile
    run = RunDir(run_dir)
    drawn_b = {t.task_id for step in (2, 3) for t in run.store.trajectories(stage="rl", step=step)}
    run.close()
    assert drawn_b and not drawn_b & solved and drawn_b <= set(profile)


def test_a_curriculum_without_pass_rates_is_refused_in_one_sentence(tmp_path, parity_env):
    recipe = load_recipe("smoke", [f"run.dir={tmp_path / 'run'}", "env.name=parity", "stages=[rl]",
                                   "tasks.sampler.kind=curriculum"])
    with pytest.raises(UserError, match=r"needs pass rates .* set tasks.profile.path or tasks.profile.tasks"):
        run_recipe(recipe)


def test_rl_stops_at_the_generated_token_budget(tmp_path, parity_env):
    run_dir = tmp_path / "run"
    run_recipe(load_recipe("smoke", [f"run.dir={run_dir}", "env.name=parity", "stages=[sft, rl]", "rl.steps=50",
                                     "rl.max_generated_tokens=800"]))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    spent = [r["tasks/generated_tokens"] for r in rows if "tasks/generated_tokens" in r]
    assert 1 < len(spent) < 50  # stopped by the budget, not by rl.steps
    assert spent[-2] < 800 <= spent[-1]  # the step that crossed the budget was the last one
    run = RunDir(run_dir)
    assert sum(t.num_action_tokens for t in run.store.trajectories(stage="rl")) == spent[-1]
    run.close()


def test_expert_error_rate_reaches_the_env_expert():
    from tracerl.envs import get_env
    from tracerl.train.demos import collect_demos
    from tracerl.run.pipeline import expert_kwargs

    spec = get_env("workplace_db")
    tasks = spec.generate("train", 10, 0)
    rewards = {}
    for rate in (0.0, 1.0):
        kw = expert_kwargs(load_recipe("workplace_db", [f"sft.expert_error_rate={rate}"]))
        rewards[rate] = [d.reward for d in collect_demos(spec, tasks, seed=0, max_turns=5, expert_kwargs=kw)]
    assert rewards == {0.0: [1.0] * 10, 1.0: [0.0] * 10}
