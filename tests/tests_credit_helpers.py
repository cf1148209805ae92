"""Hand-built multi-turn trajectories for the learned-credit tests (text_world-like: a state per step)."""

from tracerl.contract import TerminalReason, TokenRole, Trajectory


def episode(tid: str, group: str, states: list[str], actions: list[list[int]], reward: float,
            reason: TerminalReason = TerminalReason.EOS, logprob: float = -1.0, failed: tuple[int, ...] = ()) -> Trajectory:
    """prompt [1, 2]; then per turn k the action tokens `actions[k]`, followed (except after the last)
    by a one-token observation whose state hash is `states[k + 1]`; `states[0]` is the initial state.
    The observations after the turns in `failed` report `tool_status` invalid_action."""
    t = Trajectory(trajectory_id=tid, group_id=group, task_id=group, env_name="text_world",
                   initial_state_hash=states[0])
    t.append([1, 2], TokenRole.PROMPT)
    for k, act in enumerate(actions):
        s, e = t.append(act, TokenRole.ACTION, logprobs=[logprob] * len(act), policy_version=0)
        t.add_span("action", s, e)
        if k + 1 < len(actions):
            s, e = t.append([4], TokenRole.OBSERVATION)
            status = {"tool_status": "invalid_action"} if k in failed else {}
            t.add_span("observation", s, e, state_hash=states[k + 1], **status)
    t.set_reward({"correct": reward}, {"correct": 1.0})
    t.finish(reason)
    return t
