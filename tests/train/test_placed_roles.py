"""The auxiliary roles on Ray actors of their own (`placement.teachers`, `.grader`, `.critic`, `.prm`): two RL
updates with the role on its actor end where the same updates with the role in the trainer end — the policy's
weights and the trained role's weights and AdamW moments bit for bit (same threads, same minibatches drawn by the
trainer) — the judge's verdicts, calibration and manifest are the in-process judge's, and the manifest's
`placement` names the node each placed role ran on. One local Ray runtime (2 CPUs) for the module."""

import copy

import pytest
import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import StepContext
from tracerl.config import load_recipe
from tracerl.placement import record
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.train.aux_roles import build_aux_roles
from tracerl.train.roles import FrozenRole, PolicyRole, Roles
from tracerl.train.update import rl_update

pytest.importorskip("ray")

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
RAY = ["run.backend=ray", "ray.num_cpus=2", "run.threads=1", "rl.truncation=keep", "env.max_new_tokens=6"]


@pytest.fixture(autouse=True)
def _close_actors(role_actors):
    """Each test's role actors closed after it (conftest `role_actors`)."""


@pytest.fixture(scope="module")
def batch(tiny, parity_env):
    model, tok = tiny
    tasks = parity_env.generate("train", 8, 0)
    trajs = run_episodes(TorchEngine(copy.deepcopy(model), tok), parity_env, tasks, [f"g{i // 4}" for i in range(8)],
                         budgets=LoopBudgets(1, 96, 6), sampling=SAMPLING, policy_version=0, seed=0,
                         generator=torch.Generator().manual_seed(0))
    out = collate(trajs, pad_id=tok.pad_token_id, truncation="keep")
    assert 0 < float(out.reward_B.sum()) < out.size  # both labels in the batch: PRIME's PRM trains on it
    return out


@pytest.fixture(scope="module")
def teacher_dir(tiny, tmp_path_factory):
    model, tok = tiny
    teacher = copy.deepcopy(model)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in teacher.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    out = tmp_path_factory.mktemp("teacher")
    teacher.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _two_updates(recipe, model0, tok, batch):
    """Two `rl_update`s of the recipe's algorithm from `model0` (at 1 thread): the policy and the roles after them."""
    torch.manual_seed(0)  # the minibatches are drawn from the trainer's stream: the same draws both times
    model = copy.deepcopy(model0)
    algo = recipe.rl.algorithm
    reference = FrozenRole(copy.deepcopy(model0), temperature=1.0) if "reference" in algo.roles() else None
    roles = Roles(PolicyRole(model, lr=0.01, max_grad_norm=1.0, sampling=SAMPLING), reference,
                  build_aux_roles(recipe, model, None, tok))
    stats = [rl_update(algo, roles, batch, batch.reward_B, minibatches=2, ctx=StepContext(max_tokens=96, step=s))[0]
             for s in range(2)]
    return model, roles, stats


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("algo, role", [
    (["rl.algorithm.name=mopd", "rl.algorithm.kl.coef=0"], "teachers"),
    (["rl.algorithm.name=ppo", "rl.algorithm.kl.coef=0"], "critic"),
    (["rl.algorithm.name=prime"], "prm"),
])
def test_a_placed_role_trains_the_policy_as_the_trainer_does(ray_local, tiny, batch, teacher_dir, algo, role):
    model0, tok = tiny
    base = [*RAY, *algo] + ([f"roles.teachers=[{{name: t, path: {teacher_dir}}}, {{name: u, path: {teacher_dir}}}]"]
                            if role == "teachers" else [])
    here = load_recipe("smoke", base)
    there = load_recipe("smoke", [*base, f"placement.{role}.where=ray"]  # two teachers: half a CPU each
                        + (["placement.teachers.num_cpus=0.5"] if role == "teachers" else []))
    record.reset()
    m1, r1, s1 = _two_updates(here, model0, tok, batch)
    m2, r2, s2 = _two_updates(there, model0, tok, batch)
    assert s1[1]["updates"] == 2.0 and s1 == s2  # every stat of both steps, the role's losses and grad norms too
    assert _same(m1.state_dict(), m2.state_dict())
    assert _same(r1.state_dict(), r2.state_dict())  # the trained role's weights, moments and schedule from its actor
    assert not _same(m1.state_dict(), model0.state_dict())  # the updates moved the policy
    placed = record.snapshot(there)[role]
    node = ray_local.get_runtime_context().get_node_id()
    assert placed["where"] == "ray" and [w["node_id"] for w in placed["workers"]] == [node] * (2 if role == "teachers" else 1)
    if role != "teachers":  # a resumed run's state goes back into the actor: the same scores as the trainer's role
        r2.aux[role].trained.load_state_dict(r1.aux[role].trained.state_dict())
        assert _same(r2.aux[role].scores(batch, {"values", "prm"}), r1.aux[role].scores(batch, {"values", "prm"}))


def test_a_placed_grader_judges_as_the_trainer_does(ray_local, tiny_dir):
    from tracerl.config.placement import RolePlacement
    from tracerl.placement.remote_roles import RemoteGrader
    from tracerl.verifiers.learned_grader import DEFAULT_PROMPT, LearnedGrader

    opts = dict(gguf_file=None, prompt=DEFAULT_PROMPT, threshold=0.5, max_response_tokens=256)
    here = LearnedGrader.from_path(str(tiny_dir), **opts)
    record.reset()
    there = RemoteGrader(str(tiny_dir), spec=RolePlacement(where="ray"), device="cpu", threads=1, **opts)
    pairs = [("What is 2 + 3?", "<answer>5</answer>"), ("What is 7 * 6?", "a much longer answer " * 6)]
    assert here.grade(pairs) == there.grade(pairs)
    cases = [("What is 2 + 3?", "<answer>5</answer>", True), ("What is 2 + 3?", "<answer>6</answer>", False),
             ("What is 7 * 6?", "<answer>42</answer>", True), ("What is 7 * 6?", "<answer>41</answer>", False)]
    assert here.calibrate(cases, min_auroc=0.0) == there.calibrate(cases, min_auroc=0.0)
    assert here.manifest() == there.manifest() and "calibration" in there.manifest()
    assert record.snapshot(load_recipe("smoke", []))["grader"]["workers"][0]["role"] == "grader"


def test_a_placed_grader_that_cannot_load_is_one_sentence(ray_local, tmp_path):
    from tracerl.config.placement import RolePlacement
    from tracerl.config.roles import GraderConfig
    from tracerl.errors import UserError
    from tracerl.train.grading import GraderRole

    with pytest.raises(UserError, match="roles.grader.path"):
        GraderRole.build(GraderConfig(path=str(tmp_path / "none")), placement=RolePlacement(where="ray"))


def test_a_lost_role_actor_stops_the_run_in_one_sentence(ray_local, tiny, batch):
    from tracerl.errors import UserError

    model0, tok = tiny
    recipe = load_recipe("smoke", [*RAY, "rl.algorithm.name=ppo", "rl.algorithm.kl.coef=0", "placement.critic.where=ray"])
    critic = build_aux_roles(recipe, copy.deepcopy(model0), None, tok)["critic"]
    critic.group.kill(0)  # its node lost, say
    with pytest.raises(UserError, match=r"critic rank 0 on node \w+ .* died during `scores`, so the run stopped; "
                                        "continue it from its last checkpoint with tracerl train --resume"):
        critic.scores(batch, {"values"})
