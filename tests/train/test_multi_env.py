"""One run over several environments (`envs:`): load-time checks, the mixture sampler, per-domain
metrics, reward normalisation, the domain regression gate, and whole runs (mixture and cascade)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from tracerl.config import load_recipe
from tracerl.errors import UserError
from tracerl.store import Store
from tracerl.tasks import UniformSampler
from tracerl.telemetry import GateTripped
from tracerl.run.multienv import EnvMixtureSampler, EnvRouter, domain_metrics, resolve_routes, stage_envs

MINI = Path(__file__).with_name("multi_env_mini.yaml")
THREE = "envs=[{name: math_tool, share: 2}, {name: arith, share: 1, max_turns: 1}, {name: search_qa, share: 1}]"


# -- recipe load ----------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, words", [
    (["tasks.sources=[{env: code_tests, n: 5}]"], "tasks.sources.0 generates 'code_tests' tasks but the run's environment is 'math_tool'"),
    (["rl.stages=[{name: a, steps: 1, tasks: {sources: [{env: search_qa}]}}]"], "rl.stages.0.tasks.sources.0 generates 'search_qa'"),
    (["env.name=search_qa", THREE], "both env.name and envs"),
    (["envs=[{name: math_tool}, {name: math_tol}]"], "did you mean 'math_tool'"),
    (["envs=[{name: math_tool}, {name: math_tool}]"], "lists an environment twice"),
    (["envs=[{name: math_tool}, {name: code_tests, reward_weights: {correct: 1}}]"], "its verifier produces ['tests']"),
    (["envs=[{name: math_tool}, {name: code_tests, tasks: {sources: [{env: math_tool}]}}]"], "task pool of 'code_tests'"),
    ([THREE, "rl.stages=[{name: a, steps: 1, envs: [code_tests]}]"], "rl.stages.0.envs names ['code_tests']"),
    (["mixture.normalize_rewards=true"], "mixture: options apply only to a run over several environments"),
    ([THREE, "mixture.regression_tolerance=0.1", "rl.eval_every=0"], "set rl.eval_every > 0"),
])
def test_bad_environment_setups_fail_at_load_with_one_sentence(overrides, words):
    base = ["env.name=math_tool"] if not any(o.startswith("envs=") for o in overrides) else []
    recipe = "smoke" if base else str(MINI)
    with pytest.raises(UserError) as err:
        load_recipe(recipe, [*overrides] if not base else overrides)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_misrouted_source_exits_2_from_the_cli_before_anything_runs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tracerl.cli", "train", "smoke", f"run.dir={tmp_path / 'r'}",
                           "tasks.sources=[{env: code_tests, n: 5}]"], capture_output=True, text=True)
    assert proc.returncode == 2 and "code_tests" in proc.stderr and not (tmp_path / "r").exists()


def test_routes_inherit_from_env_and_override_per_entry():
    r = load_recipe(str(MINI), ["env.max_new_tokens=20", "envs.1.reward_weights={correct: 2.0}"])
    routes = {x.name: x for x in resolve_routes(r)}
    assert routes["arith"].env.max_turns == 1 and routes["math_tool"].env.max_turns == 3
    assert routes["math_tool"].env.max_new_tokens == 20 and routes["search_qa"].env.max_new_tokens == 16
    assert routes["arith"].spec.reward_weights == {"correct": 2.0}
    assert routes["math_tool"].demos == 48 and routes["arith"].demos == 24  # sft.demos 96 × share 2:1:1
    assert [s.env for s in routes["search_qa"].tasks.sources] == ["search_qa", "search_qa"]


# -- sampler, metrics, normalisation, gate (hand-worked) -------------------------------------------

def _tasks(env, n):
    return [types.SimpleNamespace(id=f"{env}-{i}", split="train", source=env) for i in range(n)]


def test_mixture_sampler_tracks_the_target_shares_exactly():
    from tracerl.contract.task import Task

    pools = {e: [Task(id=f"{e}-{i}", source=e, prompt="p") for i in range(10)] for e in ("a", "b", "c")}
    s = EnvMixtureSampler({e: UniformSampler(ts, seed=1) for e, ts in pools.items()}, {"a": 2, "b": 1, "c": 1})
    batch = s.next_batch(4)
    assert [t.source for t in batch] == ["a", "a", "b", "c"]
    s2 = EnvMixtureSampler({e: UniformSampler(ts, seed=1) for e, ts in pools.items()}, {"a": 1, "b": 1, "c": 1})
    drawn = [t.source for _ in range(3) for t in s2.next_batch(4)]  # 12 draws at 1/3 each: 4, 4, 4
    assert {e: drawn.count(e) for e in "abc"} == {"a": 4, "b": 4, "c": 4}
    assert s2.metrics()["tasks/env_share/a"] == pytest.approx(1 / 3)
    state = s2.state_dict()
    nxt = [t.id for t in s2.next_batch(5)]
    s3 = EnvMixtureSampler({e: UniformSampler(ts, seed=1) for e, ts in pools.items()}, {"a": 1, "b": 1, "c": 1})
    s3.load_state_dict(state)
    assert [t.id for t in s3.next_batch(5)] == nxt


def _traj(env, group, reward, tokens=4, truncated=False):
    from tracerl.contract import TerminalReason

    return types.SimpleNamespace(env_name=env, group_id=group, reward=reward, trainable=True, num_action_tokens=tokens,
                                 reward_components={"correct": reward}, truncated=truncated, attempt=0, spans=[],
                                 terminal_reason=TerminalReason.MAX_TURNS if truncated else TerminalReason.EOS)


def test_domain_metrics_hand_worked():
    kept = [_traj("a", "g1", 1.0), _traj("a", "g1", 0.0, tokens=8, truncated=True),
            _traj("a", "g2", 0.0), _traj("a", "g2", 0.0)]
    m = domain_metrics("a", kept, kept + [_traj("a", "g3", 1.0)] * 2, n_kept=8, n_generated=12, target=0.5)
    assert m["domain/a/reward"] == 0.25 and m["domain/a/reward_std"] == pytest.approx(0.4330127)
    assert m["domain/a/success"] == 0.25 and m["domain/a/length"] == 5.0 and m["domain/a/truncation"] == 0.25
    assert m["domain/a/zero_variance_groups"] == 1.0 and m["domain/a/zero_var_frac"] == 0.5
    assert m["domain/a/share_observed"] == 0.5 and m["domain/a/share_generated"] == 0.5 and m["domain/a/share_target"] == 0.5


def _router(**kw):
    routes = [types.SimpleNamespace(name=n, share=s, spec=None, budgets=None) for n, s in (("a", 1.0), ("b", 3.0))]
    return EnvRouter(routes, ["a", "b"], {}, **kw)


def test_per_env_normalisation_divides_by_each_domains_std():
    trajs = [types.SimpleNamespace(env_name=e) for e in ("a", "a", "b", "b")]
    r = torch.tensor([0.0, 1.0, 0.0, 10.0])
    out, stats = _router(normalize=True).normalize(r, trajs)
    assert out.tolist() == pytest.approx([0.0, 2.0, 0.0, 2.0])  # std 0.5 and 5.0
    assert stats["domain/b/reward_norm_scale"] == pytest.approx(0.2)
    same, _ = _router().normalize(r, trajs)
    assert same is r
    assert _router().targets == {"a": 0.25, "b": 0.75}


def test_regression_gate_trips_only_past_the_tolerance_below_the_best():
    g = _router(tolerance=0.1, best={"a": 0.5})
    assert g.gate(1, {"eval/a/success": 0.45, "eval/b/success": 0.2}) is None
    assert g.gate(2, {"eval/b/success": 0.3}) is None and g.best == {"a": 0.5, "b": 0.3}
    trip = g.gate(3, {"eval/a/success": 0.35, "eval/b/success": 0.3})
    assert trip.gate == "domain_regression" and trip.step == 3 and trip.value == 0.35 and "a held-out" in trip.reason
    assert _router(best={"a": 1.0}).gate(1, {"eval/a/success": 0.0}) is None  # no tolerance: no gate


# -- whole runs -----------------------------------------------------------------------------------

def test_mixture_run_completes_with_per_env_eval_telemetry_and_sft_shares(tmp_path):
    from tracerl.run.pipeline import run_recipe

    res = run_recipe(load_recipe(str(MINI), [f"run.dir={tmp_path / 'run'}"]))
    with Store(res.run_dir / "store.sqlite") as store:
        rl = list(store.trajectories(stage="rl"))
        by_group = {}
        for t in rl:
            by_group.setdefault(t.group_id, set()).add(t.env_name)
        assert all(len(v) == 1 for v in by_group.values())  # groups never mix environments
        assert {t.env_name for t in rl} == {"math_tool", "arith", "search_qa"}
        names = {(t.env_name, t.verifier_name) for t in rl}
        assert names <= {("math_tool", "math_tool.answer"), ("arith", "arith.stated_sum"),
                         ("search_qa", "search_qa.exact_entity")}
        sft = store.events("sft_mixture")[0]["payload"]
        assert {k: v["demos"] for k, v in sft.items()} == {"math_tool": 48, "arith": 24, "search_qa": 24}
        m = {r["name"]: r["value"] for r in store.metrics(stage="rl") if r["step"] == 1}
    assert m["tasks/env_share/math_tool"] == 0.5 and m["domain/arith/share_target"] == 0.25
    for env in ("math_tool", "arith", "search_qa"):
        assert f"domain/{env}/reward" in m and f"domain/{env}/zero_variance_groups" in m
        assert f"eval/{env}/success" in res.evals[0]
    assert res.evals[0]["eval/success"] == pytest.approx(sum(res.evals[0][f"eval/{e}/success"]
                                                              for e in ("math_tool", "arith", "search_qa")) / 3)
    assert len(list((res.run_dir / "eval").iterdir())) == 3  # one protocol column per environment
    from tracerl.cli import main

    assert main(["eval", str(res.run_dir)]) == 2  # several environments: `tracerl eval` needs --env
    assert main(["eval", str(res.run_dir), "--env", "arith", "--tasks", "2", "--n", "2", "--k", "1"]) == 0
    from tracerl.eval.report.html import build_report

    page = build_report(res.run_dir).read_text()
    assert "target share" in page and "observed share" in page
    assert all(f'"id":"domain_{e}"' in page for e in ("math_tool", "arith", "search_qa"))  # one figure per env


def test_cascade_changes_the_environment_set_between_stages(tmp_path):
    from tracerl.run.pipeline import run_recipe

    stages = ("rl.stages=[{name: math, steps: 1, envs: [math_tool]}, "
              "{name: words, steps: 1, envs: [arith, search_qa], reset_optimizer: true, max_new_tokens: 12}]")
    recipe = load_recipe(str(MINI), [f"run.dir={tmp_path / 'run'}", stages, "mixture={}", "rl.eval_every=0"])
    assert stage_envs(recipe) == [["math_tool"], ["arith", "search_qa"]]
    res = run_recipe(recipe)
    with Store(res.run_dir / "store.sqlite") as store:
        assert {t.env_name for t in store.trajectories(stage="rl", step=1)} == {"math_tool"}
        second = list(store.trajectories(stage="rl", step=2))
        assert {t.env_name for t in second} == {"arith", "search_qa"}
        events = store.events("rl_stage")
    assert [list(e["payload"]["envs"]) for e in events] == [["math_tool"], ["arith", "search_qa"]]


def test_regression_gate_stops_cleanly_when_one_domains_reward_is_sabotaged(tmp_path, monkeypatch):
    """arith's verifier is made to reward everything until RL starts, then nothing: its held-out
    success falls from 1.0 to 0.0 at the step-1 evaluation, past the 0.5 tolerance."""
    import tracerl.run.rl_stage as mp
    from tracerl.envs.arith.verifier import ArithStatedSum
    from tracerl.run.pipeline import run_recipe
    from tracerl.verifiers import registry

    flag = {"sabotaged": False}

    class Sabotaged(ArithStatedSum):
        def score(self, task, evidence):
            v = 0.0 if flag["sabotaged"] else 1.0
            return {"correct": v, "format": v}, {}

    monkeypatch.setitem(registry._FACTORIES, "arith.stated_sum", Sabotaged)
    real = mp.train_rl

    def train_rl(*a, **kw):
        flag["sabotaged"] = True
        return real(*a, **kw)

    monkeypatch.setattr(mp, "train_rl", train_rl)
    recipe = load_recipe(str(MINI), [f"run.dir={tmp_path / 'run'}", "rl.steps=3"])
    with pytest.raises(GateTripped) as trip:
        run_recipe(recipe)
    t = trip.value.trip
    assert t.gate == "domain_regression" and t.step == 1 and t.value == 0.0 and "arith" in t.reason
    assert (tmp_path / "run" / "checkpoints" / "step_1").is_dir()
    with Store(tmp_path / "run" / "store.sqlite") as store:
        (event,) = store.events("gate")
    assert event["payload"]["gate"] == "domain_regression" and event["step"] == 1


def test_a_recipe_without_envs_is_the_one_route_of_its_env():
    from tracerl.run.stages import recipe_tasks

    r = load_recipe("smoke", ["faults.tool_crash=0.5"])
    (route,) = resolve_routes(r, wrap=lambda s: dataclasses.replace(s, name="wrapped"))
    assert route.name == "math_tool" and route.share == 1.0 and route.env == r.env
    assert route.tasks == recipe_tasks(r) and route.demos == r.sft.demos == 96 and route.eval_tasks == r.eval.tasks == 8
    assert route.spec.name == "wrapped" and route.clean.name == "math_tool"  # training spec wrapped, evaluation's clean
    assert stage_envs(r) == [["math_tool"]]
    staged = load_recipe("smoke", ["rl.stages=[{name: a, steps: 1}, {name: b, steps: 1}]"])
    assert stage_envs(staged) == [["math_tool"], ["math_tool"]]
