"""Level 3's measures on hand-made numbers: the unnecessary / useful split, per-slice net success, the gate's
clauses, and the gradient probe at loss-masked logits (zero on a correct batch, non-zero on a leaking mask)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from ladder_levels import gates as G, level3  # noqa: E402


def test_the_gate_file_declares_level3():
    gates, _ = G.load()
    for k in ("seeds_min", "tool_cost", "net_gain_min", "error_recovery_gain_min", "observation_grad_max"):
        G.threshold(gates, "level3", k)


def test_operations_split_one_step_problems_from_two_step_ones():
    assert level3.operations("Ann has 5 apples. Ann gets 3 more. How many apples does Ann have?") == 1
    assert level3.slice_of("Bo has 7 coins. Bo gets 2 bags of 9. How many coins does Bo have?") == "unnecessary"
    two = "Cy has 12 pens. Cy gives away 4. The pens are multiplied by 3. How many pens does Cy have?"
    assert level3.operations(two) == 2 and level3.slice_of(two) == "useful"
    # the count agrees with the generator's own record of the operations it applied (a skipped give-away
    # writes no sentence), over both halves of Level 3's difficulty range
    from tracerl.envs.math_tool.generator import generate

    tasks = generate("heldout", 200, 0, (0.0, 0.5))
    assert all(level3.operations(t.prompt) == t.metadata["ops"] for t in tasks)
    assert all(level3.slice_of(t.prompt) == "unnecessary" for t in tasks if t.difficulty < 0.25 and t.metadata["ops"] == 1)
    assert {level3.slice_of(t.prompt) for t in tasks} == {"unnecessary", "useful"}


def test_slice_stats_by_hand():
    one = "Ann has 5 apples. Ann gets 3 more. How many apples does Ann have?"
    two = "Cy has 12 pens. Cy gives away 4. The pens are multiplied by 3. How many pens does Cy have?"
    eps = [(one, True, 0), (one, False, 1), (one, True, 1), (one, True, 2), (two, True, 1), (two, False, 0)]
    s = level3.slice_stats(eps, 0.1)
    # unnecessary: 3 of 4 correct = 0.75, calls (0 + 1 + 1 + 2) / 4 = 1.0, net 0.75 - 0.1 = 0.65;
    # one direct answer, correct -> no-tool success 1.0; tool-use rate 3/4
    u = s["unnecessary"]
    assert (u["episodes"], u["success"], u["calls"], u["tool_use_rate"], u["no_tool_episodes"], u["no_tool_success"]) \
        == (4, 0.75, 1.0, 0.75, 1, 1.0)
    assert u["net"] == pytest.approx(0.65)
    # useful: 1 of 2, calls 0.5, net 0.5 - 0.05 = 0.45; all: 4 of 6, calls 5/6, net 4/6 - 0.5/6 = 0.58333
    assert s["useful"]["success"] == 0.5 and s["useful"]["net"] == pytest.approx(0.45)
    assert s["all"]["net"] == pytest.approx(3.5 / 6)
    f = level3.fault_slices({"eval/slice/tool_error/success": 0.2, "eval/slice/tool_error/tool_calls_per_episode": 1.5,
                             "eval/slice/tool_error_once/success": 0.3, "eval/slice/tool_error_once/tool_calls_per_episode": 2.0,
                             "eval/slice/tool_wrong/success": 0.1, "eval/slice/tool_wrong/tool_calls_per_episode": 0.5}, 0.1)
    assert f["tool_error"]["net"] == pytest.approx(0.05) and f["tool_wrong"]["net"] == pytest.approx(0.05)
    assert f["tool_error_once"]["net"] == pytest.approx(0.1)  # 0.3 - 0.1 x 2.0


def _sl(succ, calls, err, down=0.0):
    return {"all": {"success": succ, "calls": calls, "net": succ - 0.1 * calls},
            "tool_error_once": {"success": err, "calls": 0.0, "net": err},
            "tool_error": {"success": down, "calls": 0.0, "net": down}}


def test_gate_clauses_on_hand_made_results():
    gates, _ = G.load()
    og = {"masked_max": 0.0, "observation_tokens": 30, "action_max": 0.2}
    res = {"start": {"slices": _sl(0.40, 0.8, 0.05, down=0.02)}, "obs_grad": og,
           "runs": [{"arm": a, "seed": s, "slices": _sl(0.50, 0.9, 0.10)} for a in level3.ARMS for s in (0, 1, 2)]}
    # net: start 0.40 - 0.08 = 0.32; arm 0.50 - 0.09 = 0.41 -> +0.09 at every seed; recovery is judged on
    # tool_error_once: 0.10 - 0.05 = +0.05 (the tool-down slice falls 0.02 -> 0: reported, not judged)
    c = level3.checks(res, gates)
    assert [x.passed for x in c] == [True, True, True, True]
    assert c[1].observed == pytest.approx(0.09) and c[2].observed == pytest.approx(0.05)
    assert "tool_error_once" in c[2].name
    res["runs"][-1]["slices"] = _sl(0.50, 0.9, 0.04)  # seed 2 recovers less than the start: 0.04 - 0.05 < 0.005
    c = level3.checks(res, gates)
    assert not c[2].passed and c[2].observed == pytest.approx(-0.01)
    # seed 2 of the tool-cost arm buys its success with calls: 0.45 - 0.1 x 1.5 = 0.30 < 0.32 -> net gain -0.02
    res["runs"][-1]["slices"] = _sl(0.45, 1.5, 0.10)
    c = level3.checks(res, gates)
    assert not c[1].passed and c[1].observed == pytest.approx(-0.02)
    res["runs"] = res["runs"][:-1]  # two seeds of one arm: the seeds clause fails
    assert not level3.checks(res, gates)[0].passed
    # a gradient of 1e-9 at a masked logit fails; a measure that saw no trained action is not a measurement
    assert not level3.checks(res | {"obs_grad": og | {"masked_max": 1e-9}}, gates)[3].passed
    assert level3.checks(res | {"obs_grad": og | {"action_max": 0.0}}, gates)[3].observed is None


def _episode_batch(tok):
    from tracerl.algorithms.batch import collate
    from tracerl.contract import TerminalReason, TokenRole, Trajectory

    trajs = []
    for i, reward in enumerate([1.0, 0.0, 0.0, 1.0]):  # one group: advantages +1, -1, -1, +1
        t = Trajectory(trajectory_id=f"t{i}", group_id="g", task_id="x", env_name="e")
        t.append([5, 6, 7], TokenRole.PROMPT)
        s, e = t.append([8 + i, 9], TokenRole.ACTION, logprobs=[-2.0, -2.0], policy_version=0)
        t.add_span("action", s, e)
        s, e = t.append([10, 11, 12], TokenRole.OBSERVATION)
        t.add_span("observation", s, e, tool_name="python", tool_status="ok")
        s, e = t.append([13, 14 + i % 2][: 1 + i % 2], TokenRole.ACTION, logprobs=[-2.0] * (1 + i % 2), policy_version=0)
        t.add_span("action", s, e)
        t.set_reward({"correct": reward}, {"correct": 1.0})
        t.finish(TerminalReason.EOS)
        trajs.append(t)
    return trajs, collate(trajs, pad_id=tok.pad_token_id)


def test_logit_gradient_is_zero_at_masked_positions_and_the_probe_sees_a_leak(tiny):
    import copy

    from tracerl.algorithms.spec import StepContext
    from tracerl.config import load_recipe

    model0, tok = tiny
    algo = load_recipe("default").rl.algorithm
    scoring = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    trajs, batch = _episode_batch(tok)
    ctx = StepContext(max_tokens=64)
    r = level3.logit_grads(copy.deepcopy(model0), batch, batch.reward_B, algo, ctx, [t.roles for t in trajs], scoring)
    assert r["observation_tokens"] == 12 and r["episodes"] == 4
    assert r["action_max"] > 1e-4  # the loss reaches the trained actions' logits
    assert r["masked_max"] == 0.0 and r["observation_max"] == 0.0 and r["prompt_max"] == 0.0 and r["padding_max"] == 0.0
    # a mask that lets the observations in (as a role bug would): the same probe reports their gradient
    leaky = copy.copy(batch)
    leaky.action_BT = batch.action_BT.clone()
    leaky.action_BT[:, 5:8] = 1.0  # positions 5..7: every row's observation tokens
    r = level3.logit_grads(copy.deepcopy(model0), leaky, batch.reward_B, algo, ctx, [t.roles for t in trajs], scoring)
    assert r["observation_max"] > 1e-4 and r["masked_max"] == r["observation_max"]
    assert torch.equal(batch.action_BT[:, 5:8], torch.zeros(4, 3))
