"""`Batch`: validated trajectories collated once into named tensors, the only input of an RL update.

Every tensor carries its shape in its name (`_B` per trajectory, `_BT` per token, `_BS` per policy
turn). The loss mask is derived from token roles and multiplied by the per-trajectory loss weight
here and nowhere else:

    mask_BT = action_BT · weight_B          weight 0: infrastructure failure, or a truncation under
                                            truncation policy `mask`; 1 otherwise

An infrastructure failure also leaves its group's baseline (`baseline_B` False): it is not a policy
outcome, so the other members' advantages must not be measured against its reward. Truncation
policy `penalize` replaces a truncated episode's reward by `truncation_penalty` (its loss weight
stays 1); `keep` trains it as scored. A tool cost (`rl.tool_cost`) is then subtracted here too:

    reward_B = reward_B − tool_cost · tool_calls_B      tool_calls_B: the episode's tool observations

Turns: the k-th ACTION span of a trajectory is its turn k; `turn_BT` gives each action token its
turn (−1 elsewhere) and `state_BS` the environment state the policy saw when it took that turn (the
initial state for turn 0, then the `state_hash` recorded after each step), as dense ids shared by
the whole batch — the anchor states of step-level credit (GiGPO). `failed_BS` marks the turns whose
observation reported a failed action or tool call (a span `tool_status` other than `ok`): where a
trajectory left the error-free path (MOPD's `after_error`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from tracerl.contract import TokenRole, Trajectory

TRUNCATION_POLICIES = ("mask", "penalize", "keep")


@dataclasses.dataclass
class Batch:
    ids_BT: torch.Tensor  # long, right-padded token ids
    attn_BT: torch.Tensor  # long, 1 on real tokens
    action_BT: torch.Tensor  # float, 1 on ACTION tokens (from roles)
    weight_B: torch.Tensor  # float loss weight of each trajectory
    behavior_BT: torch.Tensor  # float, behavior log-prob on ACTION tokens, 0 elsewhere
    version_BT: torch.Tensor  # long, policy version that sampled each ACTION token, -1 elsewhere
    group_B: torch.Tensor  # long, dense group index (first-appearance order)
    baseline_B: torch.Tensor  # bool, counts in its group's baseline (False for infra failures)
    reward_B: torch.Tensor  # float, the reward advantages are computed from (after the truncation policy)
    truncated_B: torch.Tensor  # bool
    length_B: torch.Tensor  # long, tokens in the episode
    turn_BT: torch.Tensor  # long, index of the policy turn of each ACTION token, -1 elsewhere
    state_BS: torch.Tensor  # long, dense id of the state each turn was taken in, -1 past the last turn
    failed_BS: torch.Tensor  # bool, the observation after the turn reported a failure (tool_status not ok)
    trajectory_ids: list[str]

    @property
    def mask_BT(self) -> torch.Tensor:
        """Tokens the loss sees: ACTION tokens of trajectories with a non-zero loss weight."""
        return self.action_BT * self.weight_B[:, None]

    @property
    def size(self) -> int:
        return self.ids_BT.shape[0]

    @property
    def turns_B(self) -> torch.Tensor:
        return (self.state_BS >= 0).sum(dim=1)

    def rows(self, idx: torch.Tensor | Sequence[int]) -> Batch:
        """The sub-batch of rows `idx`, with padding columns no row of it uses trimmed away."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        T = int(self.length_B[idx].max()) if idx.numel() else 0
        S = max(int(self.turns_B[idx].max()) if idx.numel() else 0, 1)
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "trajectory_ids":
                out[f.name] = [v[i] for i in idx.tolist()]
            elif f.name.endswith("_BT"):
                out[f.name] = v[idx, :T]
            elif f.name.endswith("_BS"):
                out[f.name] = v[idx, :S]
            else:
                out[f.name] = v[idx]
        return Batch(**out)


def loss_weight(traj: Trajectory, truncation: str) -> float:
    """1 for trajectories the loss sees; 0 for infra failures and (policy `mask`) truncations."""
    return 0.0 if (not traj.trainable or (truncation == "mask" and traj.truncated)) else 1.0


def turn_states(traj: Trajectory) -> list[str]:
    """The state the policy was in at each of its turns: the initial state, then each step's state."""
    states, current = [], traj.initial_state_hash
    for span in traj.spans:
        if span.kind == "action":
            states.append(current)
        elif span.kind == "observation" and span.state_hash is not None:
            current = span.state_hash
    return states


def tool_calls_B(trajs: Sequence[Trajectory]) -> torch.Tensor:
    """Tool calls the policy made in each trajectory: its observation spans the env attributed to a named
    tool (what telemetry's `tool/calls` counts; an invalid action's observation names no tool)."""
    return torch.tensor([sum(s.kind == "observation" and s.tool_name is not None for s in t.spans) for t in trajs],
                        dtype=torch.float32)


def collate(trajs: Sequence[Trajectory], *, pad_id: int, truncation: str = "mask",
            truncation_penalty: float = -1.0, tool_cost: float = 0.0) -> Batch:
    """Collate validated trajectories once; see the module docstring for what each tensor means."""
    if truncation not in TRUNCATION_POLICIES:
        raise ValueError(f"truncation must be one of {', '.join(TRUNCATION_POLICIES)}, got {truncation!r}")
    if not (tool_cost >= 0 and tool_cost < float("inf")):  # NaN fails both
        raise ValueError(f"tool_cost must be a finite number >= 0, got {tool_cost!r}")
    if not trajs:
        raise ValueError("cannot collate an empty batch")
    B, T = len(trajs), max(len(t) for t in trajs)
    states = [turn_states(t) for t in trajs]
    S = max(max((len(s) for s in states), default=0), 1)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    action = torch.zeros((B, T))
    behavior = torch.zeros((B, T))
    version = torch.full((B, T), -1, dtype=torch.long)
    turn = torch.full((B, T), -1, dtype=torch.long)
    state = torch.full((B, S), -1, dtype=torch.long)
    failed = torch.zeros((B, S), dtype=torch.bool)
    state_ids: dict[str, int] = {}
    group_ids: dict[str, int] = {}
    for i, t in enumerate(trajs):
        n = len(t)
        ids[i, :n] = torch.as_tensor(t.token_ids, dtype=torch.long)
        attn[i, :n] = 1
        is_action = torch.as_tensor([r == TokenRole.ACTION for r in t.roles])
        action[i, :n] = is_action.float()
        lp = torch.as_tensor(t.behavior_logprobs, dtype=torch.float32)
        behavior[i, :n] = torch.where(is_action, lp, torch.zeros_like(lp))
        version[i, :n] = torch.as_tensor(t.policy_versions, dtype=torch.long)
        k = 0
        for span in t.spans:
            if span.kind == "action":
                turn[i, span.start:span.end] = k
                k += 1
            elif span.kind == "observation" and k > 0 and span.tool_status not in (None, "ok"):
                failed[i, k - 1] = True
        for s, h in enumerate(states[i]):
            state[i, s] = state_ids.setdefault(h, len(state_ids))
        group_ids.setdefault(t.group_id, len(group_ids))
    truncated = torch.tensor([t.truncated for t in trajs])
    reward = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    if truncation == "penalize":
        reward = torch.where(truncated, torch.full_like(reward, truncation_penalty), reward)
    if tool_cost:  # 0 leaves the rewards untouched, bit for bit
        reward = reward - tool_cost * tool_calls_B(trajs)
    return Batch(ids_BT=ids, attn_BT=attn, action_BT=action,
                 weight_B=torch.tensor([loss_weight(t, truncation) for t in trajs]),
                 behavior_BT=behavior, version_BT=version,
                 group_B=torch.tensor([group_ids[t.group_id] for t in trajs], dtype=torch.long),
                 baseline_B=torch.tensor([t.trainable for t in trajs]), reward_B=reward, truncated_B=truncated,
                 length_B=torch.tensor([len(t) for t in trajs], dtype=torch.long), turn_BT=turn, state_BS=state,
                 failed_BS=failed,
                 trajectory_ids=[t.trajectory_id for t in trajs])
