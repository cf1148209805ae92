"""Spans to trajectories, without re-tokenization (docs/gateway.md, "Spans become trajectories").

An episode's calls are taken in the order they were served. A call whose prompt ids begin with the
current trajectory's ids (the previous call's prompt + completion, and whatever was appended) is
merged into it: the new prompt tokens keep the roles the gateway rendered them with (a tool result
is OBSERVATION, chat headers TEMPLATE) and the completion is appended as ACTION, exactly as
sampled, with its log-probs and policy version. Any other call starts a new trajectory of the same
episode (counted as a split); every trajectory of the episode carries the episode's reward
components (hierarchical credit: the return of the episode is assigned to each of its calls).
Every result goes through `contract.validate()`.
"""

from __future__ import annotations

import hashlib

from tracerl.contract import TokenRole, Trajectory, ids_sha256, validate
from tracerl.serve.records import CallRecord, Episode


def _append_by_role(traj: Trajectory, ids: list[int], roles: list[TokenRole]) -> list[tuple[int, int, TokenRole]]:
    runs, start = [], 0
    for j in range(1, len(ids) + 1):
        if j == len(ids) or roles[j] != roles[start]:
            s, e = traj.append(ids[start:j], roles[start])
            runs.append((s, e, roles[start]))
            start = j
    return runs


def _new_trajectory(ep: Episode, index: int, call: CallRecord, env_name: str, hashes: dict) -> Trajectory:
    return Trajectory(trajectory_id=f"{ep.episode_id}-{index}", group_id=ep.group_id or ep.episode_id,
                      task_id=ep.task_id or "", env_name=env_name, task_source=str(ep.metadata.get("task_source", "")),
                      split=str(ep.metadata.get("split", "train")), sampling=dict(call.sampling),
                      wall_start=call.started, verifier_name=ep.verifier_name, verifier_revision=ep.verifier_revision,
                      **hashes)


def segments(calls: list[CallRecord]) -> list[list[CallRecord]]:
    """Calls grouped into trajectories: a call joins the latest trajectory whose ids its prompt extends
    (so interleaved sub-agents of one episode each keep their own), else it starts a new one."""
    out: list[list[CallRecord]] = []
    ids: list[list[int]] = []  # each trajectory's ids so far
    for call in calls:
        k = next((k for k in range(len(out) - 1, -1, -1)
                  if len(call.prompt_ids) >= len(ids[k]) and call.prompt_ids[:len(ids[k])] == ids[k]), None)
        if k is None:
            out.append([call])
            ids.append([])
            k = len(out) - 1
        else:
            out[k].append(call)
        ids[k] = call.prompt_ids + call.completion_ids
    return out


def build_trajectories(ep: Episode, *, env_name: str = "gateway", tokenizer_hashes: dict | None = None) -> list[Trajectory]:
    """The validated trajectories of a finished episode; sets `ep.merges` / `ep.splits`."""
    groups = segments(ep.calls)
    ep.merges = sum(len(g) - 1 for g in groups)
    ep.splits = max(0, len(groups) - 1)
    out = []
    for k, group in enumerate(groups):
        traj = _new_trajectory(ep, k, group[0], env_name, tokenizer_hashes or {})
        turn_of: dict[str, int] = {}
        for call in group:
            new = len(traj)
            runs = _append_by_role(traj, call.prompt_ids[new:], call.prompt_roles[new:])
            if call is group[0]:
                traj.add_span("prompt", 0, len(traj))
            else:
                for s, e, role in runs:
                    if role == TokenRole.OBSERVATION:
                        traj.add_span("observation", s, e, tool_name=",".join(call.tool_names) or None,
                                      tool_status="ok" if call.tool_names else None,  # the agent sent a result back
                                      tool_response_sha256=hashlib.sha256(str(call.prompt_ids[s:e]).encode()).hexdigest())
            parent = turn_of.get(call.parent_span_id) if call.parent_span_id else None
            turn = traj.add_span("turn", new, len(traj) + len(call.completion_ids), parent_span_id=parent)
            turn_of[call.span_id] = turn.span_id
            s, e = traj.append(call.completion_ids, TokenRole.ACTION, logprobs=call.logprobs,
                               policy_version=call.policy_version)
            traj.add_span("action", s, e, parent_span_id=turn.span_id, sampled_ids_sha256=ids_sha256(call.completion_ids))
        traj.set_reward(dict(ep.reward_components), dict(ep.reward_weights))
        traj.finish(ep.terminal_reason)
        traj.wall_end = ep.ended
        traj.verifier_output = {**ep.verifier_output, "episode_id": ep.episode_id, "segment": k,
                                "segments": len(groups), "calls": [c.span_id for c in group]}
        out.append(validate(traj))
    return out
