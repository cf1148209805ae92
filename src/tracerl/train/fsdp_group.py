"""The FSDP2 learner's ranks (`learner.ranks: N`) and the policy role that drives them.

Rank 0's driver — the trainer — stays the single controller and runs the one RL step, `rl_update`
(sync or async loop alike): it plays the rollouts, collates the `Batch`, computes the no-gradient
scores (reference, proximal, teachers) with its full copy of the policy, trains the auxiliary roles
(critic, PRM), computes the advantages on whole groups and chooses each minibatch's rows; then
`ShardedPolicyRole.train_steps` sends one `update` command and every rank runs the one minibatch
loop, `policy_steps` (`train/minibatch.py`), on its share of the policy (`train/fsdp.py`). The step
ends with the full weights gathered to rank 0 and loaded into the driver's model — the next
version's weights, before the next rollout. Ranks only answer commands (build, update, scheduler
step, state); they write nothing but, under `learner.checkpoint_format: sharded`, their own shard of each
checkpoint (`write_shards`, train/shards.py).

Where the ranks live is the worker group's business (`placement.learner`, config/placement.py):
`LearnerGroup` here — local processes, the trainer's own process rank 0, commands broadcast over the
group — or `placement/ray_group.py` `RayWorkerGroup` — every rank a Ray actor, commands as actor
calls. Both answer `call(op, **kw)` with rank 0's answer, so the role does not know which it drives.
The backend follows the device: gloo on CPU, NCCL on CUDA (one GPU per rank).

The auxiliary roles (critic, PRM, teachers, reference) are replicated roles: one copy each, in the
driver process, trained there exactly as in a single-process run; only the policy is sharded.
"""

from __future__ import annotations

import atexit
import copy
import datetime
import os
import signal
import socket
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh

from tracerl.algorithms.batch import Batch
from tracerl.algorithms.spec import Algorithm, PolicyOutput, StepContext
from tracerl.errors import UserError
from tracerl.models.device import set_deterministic
from tracerl.placement.record import record_role
from tracerl.train.fsdp import ShardedPolicy
from tracerl.train.shards import SHARD_DIR
from tracerl.train.roles import score_actions
from tracerl.train.minibatch import policy_steps

_TIMEOUT = datetime.timedelta(minutes=30)
_GROUP: LearnerGroup | None = None
_RAY_GROUP = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_device(device: str, rank: int) -> str:
    """The device a local process rank trains on: the CPU, or its own GPU (rank r: cuda:r; rank 0 the model's)."""
    if not device.startswith("cuda"):
        return "cpu"
    return device if rank == 0 and ":" in device else f"cuda:{rank}"


def init_ranks(rank: int, world: int, port: int, threads: int, device: str = "cpu"):
    """Join the group on 127.0.0.1:`port` (local processes: gloo on CPU, NCCL on CUDA); the learner's device mesh."""
    torch.set_num_threads(threads)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=_TIMEOUT)
    return init_device_mesh("cuda" if cuda else "cpu", (world,))


def portable(model) -> dict:
    """A copy of `model` that pickles: gradient checkpointing's input-grad hook (a local function of transformers,
    `enable_input_require_grads`) removed, and put back by the rank that builds from it (`input_grads`)."""
    model = copy.deepcopy(model)
    hooked = False
    for m in model.modules():  # every such hook (enabling twice leaves the first set registered but untracked)
        for key, fn in list(m._forward_hooks.items()):
            if "make_inputs_require_grads" in getattr(fn, "__qualname__", ""):
                del m._forward_hooks[key]
                hooked = True
    for attr in ("_require_grads_hooks", "_require_grads_hook"):
        if hasattr(model, attr):
            delattr(model, attr)
    return {"model": model, "input_grads": hooked}


class _Rank:
    """What one rank holds: the mesh and its share of the policy; answers the commands."""

    def __init__(self, mesh, device: str = "cpu"):
        self.mesh, self.device, self.policy, self.micro = mesh, device, None, {}

    def handle(self, op: str, kw: dict):
        if op == "build":
            model = kw["model"].to(self.device) if self.device != "cpu" else kw["model"]
            if kw.get("input_grads"):
                model.enable_input_require_grads()
            previous, self.policy = self.policy, ShardedPolicy(model, lr=kw["lr"], max_grad_norm=kw["max_grad_norm"],
                                                               sampling=kw["sampling"], mesh=self.mesh,
                                                               schedule=kw.get("schedule"),
                                                               optimizer=kw.get("optimizer", "adamw"))
            self.micro = {"micro_tokens": kw.get("micro_tokens"), "packed": bool(kw["sampling"].get("packing"))}
            state = kw.get("state")
            if state and "sharded" in state:  # learner.checkpoint_format: sharded (train/shards.py)
                self.policy.restore_sharded(state, previous)
            elif state:
                self.policy.load_state_dict(state)
            return None
        if op == "update":
            ctx = kw["ctx"]
            stats = policy_steps(kw["algo"], self.policy, kw["batch"], kw["rewards"], kw["scores"], kw["adv"],
                                 kw["slices"], minibatches=kw["minibatches"], ctx=ctx, rank=dist.get_rank(),
                                 world=dist.get_world_size(), **self.micro)
            gen = ctx.generator.get_state() if ctx.generator is not None else None
            return stats, self.policy.full_weights(), gen
        if op == "scheduler":
            return self.policy.scheduler.step()
        if op == "state":
            return self.policy.small_state() if kw.get("sharded") else self.policy.state_dict()
        if op == "save_shards":
            return self.policy.save_shards(kw["path"])
        raise ValueError(f"unknown learner command {op!r}")


def _worker(rank: int, world: int, port: int, threads: int, deterministic: bool = False, device: str = "cpu") -> None:
    try:
        set_deterministic(deterministic)  # as rank 0's process (run.deterministic)
        dev = rank_device(device, rank)
        me = _Rank(init_ranks(rank, world, port, threads, dev), dev)
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
    """Local process ranks, the trainer rank 0: `call(op, **kw)` broadcasts a command every rank runs; rank 0's answer."""

    kind = "processes"

    def __init__(self, ranks: int, threads: int, device: str = "cpu"):
        self.ranks, port = ranks, free_port()
        ctx = mp.get_context("spawn")
        self.procs = [ctx.Process(target=_worker, args=(r, ranks, port, threads,
                                                        torch.are_deterministic_algorithms_enabled(), device),
                                  daemon=True)
                      for r in range(1, ranks)]
        for p in self.procs:
            p.start()
        dev = rank_device(device, 0)
        self.me = _Rank(init_ranks(0, ranks, port, torch.get_num_threads(), dev), dev)
        host = socket.gethostname()
        self.placement = [{"rank": r, "host": host, "pid": p, "device": rank_device(device, r)}
                          for r, p in enumerate([os.getpid(), *(q.pid for q in self.procs)])]

    def call(self, op: str, **kw):
        try:
            if op == "build":  # the workers get pickled copies; rank 0 shards its own copy (`portable`), not the engine's
                kw = {**kw, "state": copy.deepcopy(kw.get("state"))}
            if self.ranks > 1:
                dist.broadcast_object_list([(op, kw)], src=0)
            return self.me.handle(op, kw)
        except RuntimeError:  # a collective with a rank that is gone
            dead = [r for r, p in enumerate(self.procs, 1) if not p.is_alive()]
            if not dead:
                raise
            raise UserError(f"learner rank {dead[0]} (process {self.procs[dead[0] - 1].pid}) died during `{op}`, so the "
                            "run stopped; continue it from its last checkpoint with tracerl train --resume RUN_DIR") from None

    def kill(self, rank: int) -> None:
        os.kill(self.procs[rank - 1].pid, signal.SIGKILL)
        self.procs[rank - 1].join(timeout=30)

    @property
    def dead(self) -> bool:
        return not all(p.is_alive() for p in self.procs)

    def close(self) -> None:
        if dist.is_initialized():
            if not self.dead:
                dist.broadcast_object_list([("stop", {})], src=0)
            dist.destroy_process_group()
        for p in self.procs:
            p.join(timeout=30)


def learner_group(ranks: int, threads: int, device: str = "cpu") -> LearnerGroup:
    """The process's learner group of local processes (started once, reused by later RL stages, stopped at exit)."""
    global _GROUP
    if _GROUP is None:
        _GROUP = LearnerGroup(ranks, threads, device)
        atexit.register(_GROUP.close)
    elif _GROUP.ranks != ranks:
        raise ValueError(f"this process already runs a {_GROUP.ranks}-rank learner; learner.ranks cannot change "
                         f"between stages (got {ranks})")
    return _GROUP


def ray_learner_group(ranks: int, threads: int, device: str, spec):
    """The run's learner ranks as Ray actors (`placement/ray_group.py`), started once per run and closed with its
    Ray runtime (`rollout/ray_backend.py` closes what it opened); a later stage reuses them."""
    global _RAY_GROUP
    from tracerl.placement.ray_group import RayWorkerGroup
    from tracerl.rollout import ray_backend

    if _RAY_GROUP is not None and not _RAY_GROUP.dead and _RAY_GROUP.ranks == ranks:
        return _RAY_GROUP
    _RAY_GROUP = RayWorkerGroup("learner", ranks, spec, handler=_Rank, device=device, threads=threads,
                                deterministic=torch.are_deterministic_algorithms_enabled())
    ray_backend._OPEN.append(_RAY_GROUP)
    return _RAY_GROUP


class _Scheduler:
    def __init__(self, group: LearnerGroup):
        self.group = group

    def step(self) -> None:
        self.group.call("scheduler")


class ShardedPolicyRole:
    """`PolicyRole` on the driver for a sharded learner: `model` is the full copy the rollout engine and
    the no-gradient scoring use (it receives every version's weights); the trained shards, their
    optimizer and schedule live on the ranks of `group` (local processes by default; `ray_learner_group`)."""

    def __init__(self, model, *, lr: float, max_grad_norm: float, sampling: dict, state: dict | None = None,
                 ranks: int, threads: int, share_prefix: bool = True, schedule: dict | None = None,
                 packing: bool = False, max_tokens_per_micro_batch: int | None = None, optimizer: str = "adamw",
                 device: str = "cpu",
                 ray_spec=None, kill_at: int | None = None, checkpoint_format: str = "full"):
        self.model, self.max_grad_norm, self.kill_at = model, max_grad_norm, kill_at
        self.sharded = checkpoint_format == "sharded"  # learner.checkpoint_format
        self.scoring = {k: sampling[k] for k in ("temperature", "top_p", "top_k")} | {"share_prefix": share_prefix}
        self.scoring |= {"packing": True} if packing else {}
        self.group = (ray_learner_group(ranks, threads, device, ray_spec) if ray_spec is not None
                      else learner_group(ranks, threads, device))
        record_role("learner", {"where": self.group.kind, "ranks": ranks, "device": device,
                                "workers": self.group.placement})
        self.group.call("build", **portable(model), lr=lr, max_grad_norm=max_grad_norm, sampling=self.scoring, state=state,
                        schedule=schedule, micro_tokens=max_tokens_per_micro_batch, optimizer=optimizer)
        self.scheduler = _Scheduler(self.group)

    def score(self, batch: Batch, support: torch.Tensor | None = None) -> PolicyOutput:
        return score_actions(self.model, batch, **self.scoring, support=support)

    def train_steps(self, algo: Algorithm, batch: Batch, rewards_B: torch.Tensor, scores: dict[str, torch.Tensor],
                    adv_BT: torch.Tensor, slices: list[torch.Tensor], *, minibatches: int,
                    ctx: StepContext) -> dict[str, float]:
        """`PolicyRole.train_steps` on the ranks: each runs `policy_steps` (rank 0 of local processes on the
        arguments themselves; Ray ranks on copies, rank 0 handing back the step's generator state), then the
        gathered full weights are loaded into `model`, from which the rollout engine samples the next version."""
        if self.kill_at is not None and ctx.step + 1 == self.kill_at:  # faults.kill_learner_rank_at_step
            self.group.kill(self.group.ranks - 1)
        stats, weights, gen = self.group.call("update", algo=algo, batch=batch, rewards=rewards_B, scores=scores,
                                              adv=adv_BT, slices=slices, minibatches=minibatches, ctx=ctx)
        if gen is not None:
            ctx.generator.set_state(gen)
        self.model.load_state_dict(weights)
        return stats

    def state_dict(self) -> dict:
        """The policy's training state for `RLState.roles_state` (taken after every step): the full optimizer
        gathered to rank 0 (`full`), or only the schedule and hyper-parameters, the shards staying on the ranks
        until `write_shards` (`sharded`)."""
        if not self.sharded:
            return self.group.call("state")
        return {"sharded": {"world": self.group.ranks}, **self.group.call("state", sharded=True)}

    def write_shards(self, folder) -> dict | None:
        """Every rank writes its shard of the policy into `folder`/policy_shards (a checkpoint being written,
        train/checkpoint.py); returns what the checkpoint's manifest records, None under `full`."""
        if not self.sharded:
            return None
        self.group.call("save_shards", path=str(Path(folder) / SHARD_DIR))
        return {"format": "sharded", "world": self.group.ranks, "dir": SHARD_DIR, "storage": "dcp-safetensors"}
