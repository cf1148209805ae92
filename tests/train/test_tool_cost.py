"""rl.tool_cost: the reward advantages are computed from is lowered by cost × tool calls, in `collate` (the one
place every mode goes through), with numbers worked by hand; 0 changes nothing; sync and async both train on it."""

import copy

import pytest
import torch

from tracerl.algorithms.batch import collate, tool_calls_B
from tracerl.algorithms.spec import ALGORITHMS
from tracerl.config import load_recipe
from tracerl.contract import TerminalReason, TokenRole, Trajectory
from tracerl.envs import EnvSpec, Step, get_env
from tracerl.envs.base import register_env
from tracerl.errors import UserError
from tracerl.rollout import TorchEngine
from tracerl.rollout.workers import InProcessWorker, Runner
from tracerl.run.rl_loop import RLState, train_rl
from tracerl.store import Store
from tracerl.tasks import UniformSampler


def _traj(i: int, group: str, reward: float, calls: int, *, invalid: int = 0,
          reason=TerminalReason.EOS) -> Trajectory:
    """Prompt, then `calls` tool turns (action + named-tool observation), `invalid` invalid actions (an
    observation naming no tool), then the final action."""
    t = Trajectory(trajectory_id=f"t{i}", group_id=group, task_id="x", env_name="e")
    t.append([1, 2], TokenRole.PROMPT)
    for k in range(calls + invalid):
        s, e = t.append([3, 4], TokenRole.ACTION, logprobs=[-1.0, -1.0], policy_version=0)
        t.add_span("action", s, e)
        s, e = t.append([6, 7], TokenRole.OBSERVATION)
        t.add_span("observation", s, e, tool_name="python" if k < calls else None,
                   tool_status="ok" if k < calls else "invalid_action")
    s, e = t.append([3, 5], TokenRole.ACTION, logprobs=[-1.0, -1.0], policy_version=0)
    t.add_span("action", s, e)
    t.set_reward({"r": reward}, {"r": 1.0})
    t.finish(reason)
    return t


def test_tool_cost_lowers_each_reward_by_its_calls():
    # rewards [1, 1, 0, 1], tool calls [0, 1, 2, 3] (row 1 also made an invalid action: not a call), cost 0.25:
    # 1 - 0 = 1, 1 - 0.25 = 0.75, 0 - 0.5 = -0.5, 1 - 0.75 = 0.25
    trajs = [_traj(0, "g", 1.0, 0), _traj(1, "g", 1.0, 1, invalid=1), _traj(2, "g", 0.0, 2), _traj(3, "g", 1.0, 3)]
    assert tool_calls_B(trajs).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert collate(trajs, pad_id=0, tool_cost=0.25).reward_B.tolist() == [1.0, 0.75, -0.5, 0.25]
    # truncated row under penalize: the penalty replaces the outcome, then its calls are paid: -1 - 2 x 0.25 = -1.5
    trunc = [_traj(0, "g", 1.0, 2, reason=TerminalReason.MAX_TOKENS), _traj(1, "g", 1.0, 0)]
    assert collate(trunc, pad_id=0, truncation="penalize", tool_cost=0.25).reward_B.tolist() == [-1.5, 1.0]


def test_zero_cost_is_bit_identical():
    trajs = [_traj(0, "g", 1.0, 0), _traj(1, "g", 0.0, 2), _traj(2, "h", 1.0, 1, reason=TerminalReason.MAX_TOKENS)]
    for kw in ({}, {"truncation": "penalize"}, {"truncation": "keep"}):
        a, b = collate(trajs, pad_id=0, **kw), collate(trajs, pad_id=0, tool_cost=0.0, **kw)
        assert torch.equal(a.reward_B, b.reward_B) and torch.equal(a.weight_B, b.weight_B)


def test_tool_cost_gives_all_correct_groups_an_advantage():
    # all four correct, calls [0, 1, 2, 1], cost 0.25 -> rewards [1, 0.75, 0.5, 0.75]: mean 0.75,
    # population std sqrt((0.0625 + 0 + 0.0625 + 0) / 4) = 0.17678 -> GRPO advantages [1.4142, 0, -1.4142, 0];
    # without the cost every reward is 1 and every advantage 0
    trajs = [_traj(i, "g", 1.0, c) for i, c in enumerate([0, 1, 2, 1])]
    for cost, want in ((0.25, [1.4142, 0.0, -1.4142, 0.0]), (0.0, [0.0, 0.0, 0.0, 0.0])):
        batch = collate(trajs, pad_id=0, tool_cost=cost)
        adv_BT, _ = ALGORITHMS["grpo"]().advantages(batch, batch.reward_B, {})
        assert [round(float(a), 4) for a in adv_BT[:, 2]] == want  # token 2: the first action token


@pytest.mark.parametrize("bad", ["rl.tool_cost=-0.1", "rl.tool_cost=nan", "rl.tool_cost=.inf"])
def test_bad_tool_cost_is_refused(bad):
    with pytest.raises(UserError, match="rl.tool_cost"):
        load_recipe("smoke", [bad])
    with pytest.raises(ValueError, match="tool_cost"):
        collate([_traj(0, "g", 1.0, 0)], pad_id=0, tool_cost=float(bad.split("=")[1].replace(".inf", "inf")))


class ToolOrAnswerEnv:
    """Every episode succeeds (reward 1); an action of even length first calls a (named) tool, whose answer
    ends the episode on the next turn. Outcome-only credit sees no difference between the group's members;
    a tool cost does."""

    name, revision = "tool_or_answer", "1"

    def reset(self, task, seed):
        self.called = False
        return [{"role": "user", "content": str(task.prompt)}]

    def step(self, action_text):
        if not self.called and len(action_text) % 2 == 0:
            self.called = True
            return Step(observation="42", info={"tool": "calc", "tool_status": "ok"})
        return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components={"correct": 1.0})

    def state_hash(self):
        return "s"


def _spec() -> EnvSpec:
    base = get_env("math_tool")
    return EnvSpec(name=ToolOrAnswerEnv.name, revision="1", make=ToolOrAnswerEnv, generate=base.generate,
                   expert=base.expert, reward_weights={"correct": 1.0}, stop_strings=("</answer>",),
                   special_tokens=base.special_tokens)


SPEC = register_env(_spec())


def _train(model, tok, tmp_path, cost: float, mode: str) -> tuple[list[dict], list]:
    extra = ["rl.mode=async", "rl.max_staleness=0"] if mode == "async" else []
    recipe = load_recipe("smoke", ["rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=4", "rl.algorithm.kl.coef=0",
                                   "env.max_new_tokens=6", "rl.lr=0.01", f"env.name={SPEC.name}",
                                   "rl.checkpoint_every=0", f"rl.tool_cost={cost}", *extra])
    logged: list[dict] = []
    factory = None
    if mode == "async":
        def factory(wid, incarnation):  # an in-process worker: the same episodes, no process start-up
            return InProcessWorker(wid, Runner(copy.deepcopy(model), tok, SPEC, generator_seed=wid, tokenizer_hashes={}))
    with Store(tmp_path / f"{mode}-{cost}.sqlite") as store:
        torch.manual_seed(0)
        train_rl(model, tok, TorchEngine(model, tok), UniformSampler(SPEC.generate("train", 16, 0), seed=3), recipe,
                 spec=SPEC, log=lambda m, s: logged.append(m), on_eval=None, on_checkpoint=lambda s, st: None,
                 store=store, tokenizer_hashes={}, progress=False, state=RLState(policy_version=1),
                 worker_factory=factory)
        trained = [list(store.trajectories(stage="rl", step=s)) for s in (1, 2)]
    return logged, trained


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_tool_cost_changes_the_update_in_every_mode(tiny, tmp_path, mode):
    """Every episode earns 1: outcome-only credit takes no step (every advantage 0, the weights stay bit-identical);
    with rl.tool_cost the calls separate the group's members, the loss is non-zero and the weights move; the logged
    `reward/tool_cost` is the cost times the mean calls of the stored trained episodes."""
    model0, tok = tiny
    before = {k: v.clone() for k, v in model0.state_dict().items()}
    for cost in (0.0, 0.5):
        model = copy.deepcopy(model0)
        logged, trained = _train(model, tok, tmp_path, cost, mode)
        calls = [tool_calls_B(ts) for ts in trained]
        assert any(0 < float(c.mean()) < 1 for c in calls), "no step mixed tool calls and direct answers"
        moved = any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
        steps = [m for m in logged if "reward/mean" in m]
        assert len(steps) == 2
        if cost == 0.0:
            assert not moved and all("reward/tool_cost" not in m and "policy/loss" not in m for m in steps)
        else:
            assert moved and any(m.get("policy/loss", 0.0) != 0.0 for m in steps)
            assert [m["reward/tool_cost"] for m in steps] == pytest.approx([cost * float(c.mean()) for c in calls])
