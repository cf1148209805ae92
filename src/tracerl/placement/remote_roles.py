"""Roles answered by a Ray actor (`placement.reference.where: ray`): the KL reference's `FrozenRole` scored on
a worker of its own, placed by its resources (e.g. `{node_b: 1}`), answering the calls the in-process role
answers (`score`, `logprobs`). The trainer sends the reference model once and each step's `Batch`; the
log-probs come back as CPU tensors, the same floats as in the trainer at the same threads.
"""

from __future__ import annotations

import torch

from tracerl.placement.ray_group import RayWorkerGroup
from tracerl.placement.record import record_role

_OPEN: dict[str, RayWorkerGroup] = {}  # one live group per role name: a later RL stage replaces it


class FrozenHost:
    """The actor's side: the `FrozenRole` on the actor's device."""

    def __init__(self, device: str):
        self.device, self.role = device, None

    def handle(self, op: str, kw: dict):
        from tracerl.train.roles import FrozenRole

        if op == "build":
            model = kw["model"].to(self.device) if self.device != "cpu" else kw["model"]
            self.role = FrozenRole(model, temperature=kw["temperature"], share_prefix=kw["share_prefix"])
            return None
        if op == "score":
            out = self.role.score(kw["batch"], support=kw.get("support"))
            return type(out)(**{k: None if v is None else v.cpu() for k, v in vars(out).items()})
        raise ValueError(f"unknown reference command {op!r}")


class RemoteFrozenRole:
    """`FrozenRole` on one Ray actor of `spec` (config/placement.py `RolePlacement`)."""

    def __init__(self, name: str, model, *, temperature: float, share_prefix: bool, spec, device: str, threads: int):
        from tracerl.rollout import ray_backend

        old = _OPEN.pop(name, None)
        if old is not None:  # the previous stage's copy (e.g. reset_reference): its resources back first
            old.close()
        self.group = RayWorkerGroup(name, 1, spec, handler=FrozenHost, device=device, threads=threads,
                                    deterministic=torch.are_deterministic_algorithms_enabled(), distributed=False)
        _OPEN[name] = self.group
        ray_backend._OPEN.append(self.group)
        record_role(name, {"where": "ray", "device": device, "workers": self.group.placement})
        self.group.call("build", model=model, temperature=temperature, share_prefix=share_prefix)

    def score(self, batch, support=None):
        return self.group.call("score", batch=batch, support=support)

    def logprobs(self, batch) -> torch.Tensor:
        return self.score(batch).full_logprobs_BT
