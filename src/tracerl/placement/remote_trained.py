"""Trained auxiliary roles on a Ray actor of their own (`placement.critic` / `placement.prm`, config/placement.py).

The actor holds the role itself (`train/aux_roles.py` `CriticRole` / `PRMRole`: its parameters, AdamW state and
schedule) and runs what the trainer would: `scores` (values, PRM log-probs) and `train_steps` — the forward, the
algorithm's `role_loss` and the optimizer step of each minibatch (train/update.py `role_steps`). The trainer draws
the minibatches from its own random stream and sends them with the batch, so a placed role takes the same steps
as one in the trainer. Checkpoints go through it: `trained.state_dict()` comes back on the CPU and is saved in
the trainer state (`trainer_state.json` + `.safetensors`) as the in-process role's is; `trained.load_state_dict` sends a resumed run's back.
"""

from __future__ import annotations

from tracerl.placement.remote_roles import start_actor, to_cpu


class TrainedHost:
    """The actor's side: the role built from the trainer's model copy, on the actor's device."""

    def __init__(self, device: str):
        self.device, self.role = device, None

    def handle(self, op: str, kw: dict):
        role = self.role
        if op == "build":
            model = kw["model"].to(self.device)
            if kw["input_grads"]:  # gradient checkpointing's hook, dropped to pickle the copy (fsdp_group.portable)
                model.enable_input_require_grads()
            self.role = role = kw["make"](model)
            return {"provides": role.provides, "warmup_steps": role.warmup_steps}
        if op == "scores":
            return to_cpu(role.scores(kw["batch"], kw["needs"]))
        if op == "train_steps":
            return role.train_steps(*kw["args"], **kw["kw"])
        if op == "state_dict":
            return to_cpu(role.trained.state_dict())
        if op == "load_state_dict":
            return role.trained.load_state_dict(kw["state"])
        raise ValueError(f"unknown trained-role command {op!r}")


class _RemoteState:
    """`role.trained` as `Roles.state_dict` and a resumed run use it: the actor's weights, optimizer and schedule."""

    def __init__(self, group):
        self.group = group

    def state_dict(self) -> dict:
        return self.group.call("state_dict")

    def load_state_dict(self, state: dict) -> None:
        self.group.call("load_state_dict", state=state)


class RemoteTrainedRole:
    """`make(model)` (a `CriticRole` / `PRMRole`) on one Ray actor of `spec`, answering `scores`, `train_steps`,
    `provides`, `warmup_steps` and `trained.state_dict` / `load_state_dict` as the role does in the trainer."""

    def __init__(self, name: str, model, make, *, spec, device: str, threads: int):
        from tracerl.train.fsdp_group import portable

        self.group = start_actor(name, TrainedHost, spec=spec, device=device, threads=threads)
        copy = portable(model)
        info = self.group.call("build", model=copy["model"], input_grads=copy["input_grads"], make=make)
        self.provides, self.warmup_steps = info["provides"], info["warmup_steps"]
        self.trained = _RemoteState(self.group)

    def scores(self, batch, needs: set[str]) -> dict:
        return self.group.call("scores", batch=batch, needs=needs)

    def train_steps(self, *args, **kw) -> dict[str, float]:
        return self.group.call("train_steps", args=args, kw=kw)
