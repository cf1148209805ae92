"""Frozen roles answered by a Ray actor of their own (`placement.<role>.where: ray`, config/placement.py):

- the KL reference and each MOPD teacher: a `FrozenRole` scored on the actor (`RemoteFrozenRole`, the same
  `score` / `logprobs` calls as in the trainer). The trainer sends the model once and each step's `Batch`; the
  log-probs come back as CPU tensors, the same floats as in the trainer at the same threads;
- the learned judge (`roles.grader.path`): a `LearnedGrader` the actor loads itself, on its node
  (`RemoteGrader`: `grade`, `calibrate`, `manifest` as the in-process grader answers them).

Trained roles (critic, PRM) are in `remote_trained.py`. Each role's actor is placed by its resources (e.g.
`{node_b: 1}`) and recorded in the manifest's `placement` (`record.py`).
"""

from __future__ import annotations

import torch

from tracerl.errors import UserError
from tracerl.placement.ray_group import RayWorkerGroup
from tracerl.placement.record import add_workers

_OPEN: dict[str, RayWorkerGroup] = {}  # one live group per role name: a later RL stage replaces it


def start_actor(name: str, host, *, spec, device: str, threads: int, record_as: str | None = None) -> RayWorkerGroup:
    """One actor of `spec` for role `name` answering through `host` (its handler), replacing the previous stage's
    and closed with the run; where it runs is recorded under `record_as` (default `name`)."""
    from tracerl.rollout import ray_backend

    old = _OPEN.pop(name, None)
    if old is not None:  # the previous stage's copy (e.g. reset_reference): its resources back first
        old.close()
    group = RayWorkerGroup(name, 1, spec, handler=host, device=device, threads=threads,
                           deterministic=torch.are_deterministic_algorithms_enabled(), distributed=False)
    _OPEN[name] = group
    ray_backend._OPEN.append(group)
    add_workers(record_as or name, device, [dict(w, role=name) for w in group.placement])
    return group


def to_cpu(x):
    """Tensors of a (nested) answer on the CPU, so a trainer without the actor's GPU can read them."""
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, dict):
        return {k: to_cpu(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return type(x)(to_cpu(v) for v in x)
    return x


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
        raise ValueError(f"unknown frozen-role command {op!r}")


class RemoteFrozenRole:
    """`FrozenRole` on one Ray actor of `spec` (config/placement.py `RolePlacement`)."""

    def __init__(self, name: str, model, *, temperature: float, share_prefix: bool, spec, device: str, threads: int,
                 record_as: str | None = None):
        self.group = start_actor(name, FrozenHost, spec=spec, device=device, threads=threads, record_as=record_as)
        self.group.call("build", model=model, temperature=temperature, share_prefix=share_prefix)

    def score(self, batch, support=None):
        return self.group.call("score", batch=batch, support=support)

    def logprobs(self, batch) -> torch.Tensor:
        return self.score(batch).full_logprobs_BT


_GRADER_STATE = ("name", "revision", "prompt_sha256", "model_sha256", "threshold", "calibration")


class GraderHost:
    """The actor's side of the judge: a `LearnedGrader` loaded here (its model on the actor's device)."""

    def __init__(self, device: str):
        self.device, self.grader = device, None

    def _state(self) -> dict:
        return {k: getattr(self.grader, k) for k in _GRADER_STATE}

    def handle(self, op: str, kw: dict):
        from tracerl.verifiers.learned_grader import LearnedGrader

        if op == "build":
            try:
                self.grader = LearnedGrader.from_path(kw["path"], **kw["options"])
            except (UserError, ValueError) as err:  # re-raised as the same kind in the trainer: one sentence
                return {"error": "user" if isinstance(err, UserError) else "value", "message": str(err)}
            self.grader.model.to(self.device)
            return self._state()
        if op == "grade":
            return self.grader.grade(kw["pairs"])
        if op == "calibrate":
            return self.grader.calibrate(kw["cases"], **kw["options"]), self._state()
        raise ValueError(f"unknown grader command {op!r}")


class RemoteGrader:
    """`LearnedGrader.from_path(path, **options)` on one Ray actor of `spec`; the verdicts, calibration and
    manifest are the in-process grader's."""

    components, primary = ("judge",), "judge"

    def __init__(self, path: str, *, spec, device: str, threads: int, **options):
        from tracerl.verifiers.learned_grader import LearnedGrader

        self.group = start_actor("grader", GraderHost, spec=spec, device=device, threads=threads)
        state = self.group.call("build", path=path, options=options)
        if "error" in state:
            self.group.close()
            raise (UserError if state["error"] == "user" else ValueError)(state["message"])
        vars(self).update(state)
        self._manifest = LearnedGrader.manifest

    def grade(self, pairs) -> list:
        return self.group.call("grade", pairs=list(pairs))

    def calibrate(self, cases, **options):
        cal, state = self.group.call("calibrate", cases=list(cases), options=options)
        vars(self).update(state)
        return cal

    def manifest(self) -> dict:
        return self._manifest(self)  # the same record as the in-process grader's, from the actor's state
