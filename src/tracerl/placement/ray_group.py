"""A role on N Ray actors forming one `torch.distributed` group (`placement.learner.where: ray`), or on one
actor without a group (`placement.reference.where: ray`, `distributed=False`).

`RayWorkerGroup` reserves one placement-group bundle per rank (`placement.learner`: CPUs, GPUs, custom
resources such as `{node_a: 1}`, a PACK / SPREAD strategy), starts one `_Actor` in each, and joins
them into a process group: rank 0's actor names its node's address and a free port there (never
127.0.0.1, so ranks on other nodes reach it), every actor calls `init_process_group` with it, gloo on
CPU and NCCL on CUDA (the backend follows the device, the code is the same). Each actor then builds
the role's handler (`handler(mesh=, device=)`, e.g. the learner's `_Rank`) and answers
`call(op, **kw)`: the same command runs on every rank at once, the group returns rank 0's answer.

A rank that dies (its actor killed, its node lost) fails its call with `RayActorError` while the
others wait in a collective: the group kills every rank and stops the run with one sentence
(`UserError`, exit 2) naming the rank, its node and how to resume.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys

from tracerl.errors import UserError

_TIMEOUT = datetime.timedelta(minutes=30)


class _Actor:
    """One rank: its process's threads and determinism as the trainer's, then the process group and handler."""

    def __init__(self, rank: int, world: int, threads: int, deterministic: bool, sys_path: list[str]):
        import torch

        for p in sys_path:  # what the driver imports (test modules, --import) is importable here too
            if p not in sys.path and os.path.isdir(p):
                sys.path.append(p)
        torch.set_num_threads(threads)
        from tracerl.models.device import set_deterministic

        set_deterministic(deterministic)
        self.rank, self.world, self.handler = rank, world, None

    def where(self) -> dict:
        import ray

        ctx = ray.get_runtime_context()
        return {"rank": self.rank, "node_id": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(),
                "pid": os.getpid(), "gpus": [str(g) for g in ray.get_gpu_ids()]}

    def rendezvous(self) -> tuple[str, int]:
        """This node's address and a free port on it (rank 0: the group's master)."""
        import ray

        ip = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind((ip, 0))
            return ip, s.getsockname()[1]

    def join(self, addr: str, port: int, device: str, handler) -> None:
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        cuda = device.startswith("cuda")
        if cuda:  # Ray set CUDA_VISIBLE_DEVICES to this actor's GPUs: its first is cuda:0
            torch.cuda.set_device(0)
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://{addr}:{port}", rank=self.rank,
                                world_size=self.world, timeout=_TIMEOUT)
        mesh = init_device_mesh("cuda" if cuda else "cpu", (self.world,))
        self.handler = handler(mesh=mesh, device="cuda:0" if cuda else "cpu")

    def setup(self, device: str, handler) -> None:
        """A role without a process group (one worker, e.g. the reference): just its handler."""
        import torch

        if device.startswith("cuda"):
            torch.cuda.set_device(0)
        self.handler = handler(device="cuda:0" if device.startswith("cuda") else "cpu")

    def call(self, op: str, kw: dict):
        out = self.handler.handle(op, kw)
        return out if self.rank == 0 else None  # the others' answers are rank 0's, or nothing

    def stop(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _spec_bundle(spec) -> dict[str, float]:
    bundle = {"CPU": float(spec.num_cpus), **{k: float(v) for k, v in spec.resources.items()}}
    return bundle | ({"GPU": float(spec.num_gpus)} if spec.num_gpus else {})


class RayWorkerGroup:
    """`ranks` actors of role `name` in one placement group of `spec` (config/placement.py `LearnerPlacement`)."""

    kind = "ray"

    def __init__(self, name: str, ranks: int, spec, *, handler, device: str, threads: int, deterministic: bool,
                 distributed: bool = True):
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._ray, self.name, self.ranks, self.dead = ray, name, ranks, False
        bundle = _spec_bundle(spec)
        strategy, wait_s = getattr(spec, "strategy", "PACK"), getattr(spec, "start_timeout_s", 120.0)
        self.pg = placement_group([dict(bundle) for _ in range(ranks)], strategy=strategy)
        ready, _ = ray.wait([self.pg.ready()], timeout=wait_s)
        if not ready:
            ray.util.remove_placement_group(self.pg)
            raise UserError(f"the {ranks} {name} worker(s), each reserving {bundle}, found no room on the Ray cluster "
                            f"within {wait_s:g} s ({strategy}); start nodes with those resources or change "
                            f"placement.{name}")
        remote = ray.remote(max_restarts=0, max_concurrency=2)(_Actor)
        path = [os.path.abspath(p or ".") for p in sys.path]
        self.actors = [remote.options(num_cpus=spec.num_cpus, num_gpus=spec.num_gpus, resources=dict(spec.resources),
                                      scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, i))
                       .remote(i, ranks, threads, deterministic, path) for i in range(ranks)]
        self.placement = [dict(w, bundle=bundle) for w in self._all(lambda a: a.where.remote(), "start")]
        if not distributed:
            self._all(lambda a: a.setup.remote(device, handler), "start")
            return
        addr, port = ray.get(self.actors[0].rendezvous.remote())
        self._all(lambda a: a.join.remote(addr, port, device, handler), "join")

    def _node(self, rank: int) -> str:
        w = self.placement[rank] if getattr(self, "placement", None) else {}
        return f"node {w.get('node_id', '?')[:12]} ({w.get('ip', '?')})"

    def _all(self, send, op: str) -> list:
        """`send(actor)` on every rank; their answers, or the run stopped with one sentence when one fails."""
        ray = self._ray
        if self.dead:
            raise UserError(f"the {self.name} group lost a rank earlier in this run; resume it with tracerl train --resume")
        refs = [send(a) for a in self.actors]
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except ray.exceptions.RayActorError:
                rank = refs.index(done[0])
                self.close()
                raise UserError(f"{self.name} rank {rank} on {self._node(rank)} died during `{op}`, so the run stopped; "
                                "continue it from its last checkpoint with tracerl train --resume RUN_DIR") from None
            except ray.exceptions.RayTaskError as err:  # a Python error on a rank: the others wait in a collective
                rank = refs.index(done[0])
                self.close()
                raise RuntimeError(f"{self.name} rank {rank} failed during `{op}`: {err}") from None
        return ray.get(refs)

    def call(self, op: str, **kw):
        """Command `op` on every rank (the arguments put in the object store once); rank 0's answer."""
        ref = self._ray.put(kw)
        return self._all(lambda a: a.call.remote(op, ref), op)[0]

    def kill(self, rank: int) -> None:
        """Kill one rank's actor (faults.kill_learner_rank_at_step; a lost node does the same)."""
        self._ray.kill(self.actors[rank], no_restart=True)

    def close(self) -> None:
        if self.dead:
            return
        self.dead = True
        for a in self.actors:
            try:
                self._ray.kill(a, no_restart=True)
            except Exception:  # already gone, or the runtime is shutting down
                pass
        try:
            self._ray.util.remove_placement_group(self.pg)
        except Exception:
            pass
