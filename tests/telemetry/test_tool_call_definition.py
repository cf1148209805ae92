"""One definition of a tool call everywhere: an observation whose env named the tool it ran.
The console (held-out run), the stored results / report (aggregate) and the RL metrics agree."""

from tracerl.contract import TerminalReason, TokenRole, Trajectory
from tracerl.eval.aggregate import aggregate, samples_from_trajectories
from tracerl.telemetry.episodes import tool_calls, tool_metrics


def _episode(i, statuses):
    """statuses: one (tool name or None, tool status) per observation after an action turn."""
    t = Trajectory(trajectory_id=f"t{i}", group_id="g", task_id=f"k{i}", env_name="toy", split="heldout")
    t.append([1], TokenRole.PROMPT)
    for name, status in statuses:
        s, e = t.append([2], TokenRole.ACTION, logprobs=[-0.1], policy_version=0)
        t.add_span("action", s, e)
        s, e = t.append([3], TokenRole.OBSERVATION)
        t.add_span("observation", s, e, tool_name=name, tool_status=status)
    s, e = t.append([4], TokenRole.ACTION, logprobs=[-0.1], policy_version=0)
    t.add_span("action", s, e)
    t.set_reward({"correct": 1.0}, {"correct": 1.0})
    t.finish(TerminalReason.EOS)
    return t


def test_invalid_actions_are_not_tool_calls_anywhere():
    # episode 0: a python call (ok) and an unparseable turn (no tool named); episode 1: a python call
    # that errors; episode 2: no tool at all → calls 1 + 1 + 0 = 2 over 3 episodes = 0.667
    trajs = [_episode(0, [("python", "ok"), (None, "invalid_action")]), _episode(1, [("python", "error")]),
             _episode(2, [])]
    assert [len(tool_calls(t)) for t in trajs] == [1, 1, 0]
    rl = tool_metrics(trajs)
    assert rl["tool/calls_per_episode"] == 2 / 3 and rl["tool/error_rate"] == 1 / 2
    assert rl["env/invalid_actions"] == 1.0  # still counted, as an invalid action
    report = aggregate(samples_from_trajectories(trajs, lambda t: True), [1])
    assert report["tool_calls_per_episode"] == 2 / 3 and report["tool_use_rate"] == 2 / 3
    assert report["tool_error_rate"] == 1 / 2


def test_a_tool_call_without_a_status_is_counted_as_unknown_not_as_an_error():
    """An env that names its tool but reports no status: 3 calls (ok, none, error) → error rate 1/3,
    one `tool/status_unknown` (this used to raise in the metric's name)."""
    trajs = [_episode(0, [("python", "ok"), ("python", None)]), _episode(1, [("python", "error")])]
    rl = tool_metrics(trajs)
    assert rl["tool/calls"] == 3.0 and rl["tool/error_rate"] == 1 / 3
    assert rl["tool/status_unknown"] == 1.0 and rl["tool/status_error"] == 1.0
    report = aggregate(samples_from_trajectories(trajs, lambda t: True), [1])
    assert report["tool_error_rate"] == 1 / 3  # the report agrees
