"""The FSDP2 learner's process group (`learner.ranks: N`, gloo on CPU): the trainer's own process
is rank 0 and starts N − 1 learner worker processes the first time an RL stage needs them.

Rank 0 stays the single controller and runs the one RL step, `rl_update` (sync or async loop
alike): it plays the rollouts, collates the `Batch`, computes the no-gradient scores (reference,
proximal, teachers) with its full copy of the policy, trains the auxiliary roles (critic, PRM),
computes the advantages on whole groups and chooses each minibatch's rows; then
`ShardedPolicyRole.train_steps` broadcasts one `update` command and every rank runs the one
minibatch loop, `policy_steps` (`train/minibatch.py`), on its share of the policy (`train/fsdp.py`).
The step ends with the full weights gathered to rank 0 and loaded into the rollout engine's model —
the next version's weights, before the next rollout. Workers only answer commands (build, update,
scheduler step, state); they write nothing.

The auxiliary roles (critic, PRM, teachers, reference) are replicated roles: one copy each, in the
driver process, trained there exactly as in a single-process run; only the policy is sharded.
"""

from __future__ import annotations

import atexit
import copy
import datetime
import socket
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh

from tracerl.algorithms.batch import Batch
from tracerl.algorithms.spec import Algorithm, PolicyOutput, StepContext
from tracerl.train.fsdp import ShardedPolicy
from tracerl.train.roles import score_actions
from tracerl.train.minibatch import policy_steps

_TIMEOUT = datetime.timedelta(minutes=30)
_GROUP: LearnerGroup | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_ranks(rank: int, world: int, port: int, threads: int):
    """Join the gloo group on 127.0.0.1:`port`; returns the CPU device mesh of the learner."""
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=_TIMEOUT)
    return init_device_mesh("cpu", (world,))


class _Rank:
    """What one rank holds: the mesh and its share of the policy; answers the commands."""

    def __init__(self, mesh):
        self.mesh, self.policy = mesh, None

    def handle(self, op: str, kw: dict):
        if op == "build":
            self.policy = ShardedPolicy(kw["model"], lr=kw["lr"], max_grad_norm=kw["max_grad_norm"],
                                        sampling=kw["sampling"], mesh=self.mesh, schedule=kw.get("schedule"))
            if kw.get("state"):
                self.policy.load_state_dict(kw["state"])
            return None
        if op == "update":
            stats = policy_steps(kw["algo"], self.policy, kw["batch"], kw["rewards"], kw["scores"], kw["adv"],
                                 kw["slices"], minibatches=kw["minibatches"], ctx=kw["ctx"], rank=dist.get_rank(),
                                 world=dist.get_world_size())
            return stats, self.policy.full_weights()
        if op == "scheduler":
            return self.policy.scheduler.step()
        if op == "state":
            return self.policy.state_dict()
        raise ValueError(f"unknown learner command {op!r}")


def _worker(rank: int, world: int, port: int, threads: int, deterministic: bool = False) -> None:
    try:
        torch.use_deterministic_algorithms(deterministic, warn_only=True)  # as rank 0's process (run.deterministic)
        me = _Rank(init_ranks(rank, world, port, threads))
        while True:
            msg = [None]
            dist.broadcast_object_list(msg, src=0)
            op, kw = msg[0]
            if op == "stop":
                break
            me.handle(op, kw)
        dist.destroy_process_group()
    except Exception:  # the peer's collective fails as this process exits; say why here
        traceback.print_exc()
        raise


class LearnerGroup:
    """Rank 0's handle on the group: `call(op, **kw)` runs a command on every rank, returns rank 0's answer."""

    def __init__(self, ranks: int, threads: int):
        self.ranks, port = ranks, free_port()
        ctx = mp.get_context("spawn")
        self.procs = [ctx.Process(target=_worker, args=(r, ranks, port, threads,
                                                              torch.are_deterministic_algorithms_enabled()), daemon=True)
                      for r in range(1, ranks)]
        for p in self.procs:
            p.start()
        self.me = _Rank(init_ranks(0, ranks, port, torch.get_num_threads()))

    def call(self, op: str, **kw):
        dist.broadcast_object_list([(op, kw)], src=0)
        if op == "build":  # the workers got pickled copies; rank 0 shards its own copies, not the engine's model
            kw = {**kw, "model": copy.deepcopy(kw["model"]), "state": copy.deepcopy(kw.get("state"))}
        return self.me.handle(op, kw)

    def close(self) -> None:
        if dist.is_initialized():
            dist.broadcast_object_list([("stop", {})], src=0)
            dist.destroy_process_group()
        for p in self.procs:
            p.join(timeout=30)


def learner_group(ranks: int, threads: int) -> LearnerGroup:
    """The process's learner group (started once, reused by later RL stages, stopped at exit)."""
    global _GROUP
    if _GROUP is None:
        _GROUP = LearnerGroup(ranks, threads)
        atexit.register(_GROUP.close)
    elif _GROUP.ranks != ranks:
        raise ValueError(f"this process already runs a {_GROUP.ranks}-rank learner; learner.ranks cannot change "
                         f"between stages (got {ranks})")
    return _GROUP


class _Scheduler:
    def __init__(self, group: LearnerGroup):
        self.group = group

    def step(self) -> None:
        self.group.call("scheduler")


class ShardedPolicyRole:
    """`PolicyRole` on rank 0 for a sharded learner: `model` is the full copy the rollout engine and
    the no-gradient scoring use (it receives every version's weights); the trained shards, their
    optimizer and schedule live on the ranks."""

    def __init__(self, model, *, lr: float, max_grad_norm: float, sampling: dict, state: dict | None = None,
                 ranks: int, threads: int, share_prefix: bool = True, schedule: dict | None = None):
        self.model, self.max_grad_norm = model, max_grad_norm
        self.scoring = {k: sampling[k] for k in ("temperature", "top_p", "top_k")} | {"share_prefix": share_prefix}
        self.group = learner_group(ranks, threads)
        self.group.call("build", model=model, lr=lr, max_grad_norm=max_grad_norm, sampling=self.scoring, state=state,
                        schedule=schedule)
        self.scheduler = _Scheduler(self.group)

    def score(self, batch: Batch, support: torch.Tensor | None = None) -> PolicyOutput:
        return score_actions(self.model, batch, **self.scoring, support=support)

    def train_steps(self, algo: Algorithm, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor],
                    adv_BT: torch.Tensor, slices: list[torch.Tensor], *, minibatches: int,
                    ctx: StepContext) -> dict[str, float]:
        """`PolicyRole.train_steps` on the ranks: each runs `policy_steps` (rank 0 on the arguments themselves,
        so the step's generator advances here as in one process; the workers on pickled copies), then the
        gathered full weights are loaded into `model`, from which the rollout engine samples the next version."""
        stats, weights = self.group.call("update", algo=algo, batch=batch, rewards=rewards_B, scores=scores,
                                         adv=adv_BT, slices=slices, minibatches=minibatches, ctx=ctx)
        self.model.load_state_dict(weights)
        return stats

    def state_dict(self) -> dict:
        return self.group.call("state")
