import pytest

from tracerl.contract import TerminalReason, TokenRole, Trajectory, ids_sha256


def make_trajectory(tid: str = "t0") -> Trajectory:
    """prompt(3) action(2) observation(2) action(2): a valid two-turn tool episode."""
    t = Trajectory(trajectory_id=tid, group_id="g0", task_id="task-1", env_name="math_tool")
    t.append([5, 6, 7], TokenRole.PROMPT)
    s, e = t.append([10, 11], TokenRole.ACTION, logprobs=[-0.5, -1.25], policy_version=3)
    t.add_span("action", s, e, sampled_ids_sha256=ids_sha256([10, 11]))
    s, e = t.append([20, 21], TokenRole.OBSERVATION)
    t.add_span("observation", s, e, tool_name="python", tool_status="ok")
    s, e = t.append([12, 13], TokenRole.ACTION, logprobs=[-0.125, -2.0], policy_version=4)
    t.add_span("action", s, e, sampled_ids_sha256=ids_sha256([12, 13]))
    t.set_reward({"correct": 1.0, "format": 1.0}, {"correct": 1.0, "format": 0.1})
    t.finish(TerminalReason.EOS)
    return t


@pytest.fixture
def traj() -> Trajectory:
    return make_trajectory()


@pytest.fixture
def make_traj():
    return make_trajectory
