"""Gateway throughput: calls/s and the latency it adds per call over the in-process engine, and its
behaviour with 8 concurrent agents (measured side by side in one process, so only ratios matter).

    python benchmarks/gateway.py [--calls 40] [--new-tokens 24] [--agents 8] [--threads 1] [--engines-only]

1. sequential: the same seeded calls (same prompt, same seed, so the same tokens: equal work) made
   with `engine.generate` in-process and with `client.completions.create` through the gateway on
   127.0.0.1, interleaved call by call; then the same with one new token, where the HTTP, JSON and
   rendering cost is most of the call;
2. concurrent: `--agents` threads, each an agent making `--calls // 2` chat calls (no seed, so the
   gateway's worker batches them), against `--agents` rows generated in-process as one batch;
3. engines: the same `--agents` agents, each its own episode, against a gateway fronting 1 and then 2 engine
   processes of `--threads` torch threads each (serve/engine_pool.py, `gateway.agent` with
   `rollout.workers: 2`), in alternating rounds so load on the machine falls on both alike.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tracerl.envs import get_env  # noqa: E402
from tracerl.models import build_tiny, load_model_and_tokenizer  # noqa: E402
from tracerl.rollout import TorchEngine  # noqa: E402
from tracerl.rollout.render import render_prompt  # noqa: E402
from tracerl.serve import Gateway  # noqa: E402
from tracerl.serve.engine_pool import EnginePool  # noqa: E402
from tracerl.serve.engine_proc import EngineProcess, engine_settings  # noqa: E402
from tracerl.serve.server import ServerThread  # noqa: E402


def build(tmp: Path, hidden: int = 96, layers: int = 3):
    spec = get_env("calc_json")
    tasks = spec.generate("train", 200, 0)
    env = spec.make()
    texts = [m["content"] for t in tasks for m in env.reset(t, 0)]
    texts += [spec.expert(t, [], random.Random(0), tool_rate=1.0) for t in tasks]
    path = build_tiny(tmp / "m", texts, tags=spec.special_tokens, vocab_size=448, hidden_size=hidden, num_layers=layers,
                      num_heads=4, intermediate_size=3 * hidden, max_positions=512, seed=0)
    model, tok = load_model_and_tokenizer(path)
    return spec, tasks, model, tok


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="engines arm: alternating rounds per gateway")
    ap.add_argument("--engines-only", action="store_true", help="run only the 1-vs-2-engines arm")
    ap.add_argument("--hidden-size", type=int, default=96, help="the tiny model's width (96: the default arms)")
    ap.add_argument("--num-layers", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import openai

    with tempfile.TemporaryDirectory() as d:
        spec, tasks, model, tok = build(Path(d), args.hidden_size, args.num_layers)
    engine = TorchEngine(model, tok)
    msgs = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": str(t.prompt)}] for t in tasks]
    if args.engines_only:
        return engines_arm(args, engine, model, tok, msgs)
    prompts = [render_prompt(tok, m)[0] for m in msgs]
    n, T = args.calls, args.new_tokens
    kw = dict(temperature=1.0, top_p=1.0, top_k=0, stop_strings=(), stop_token_ids=[tok.eos_token_id])

    # warm both paths once
    engine.generate([prompts[0]], max_new_tokens=T, generator=torch.Generator().manual_seed(0), **kw)
    gw = Gateway(engine, model_name="bench", default_max_tokens=T, max_batch=max(16, args.agents))
    with ServerThread(gw) as srv, openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0, timeout=300) as client:
        client.completions.create(model="bench", prompt=prompts[0], max_tokens=T, seed=0)

        inproc, served, tok_in, tok_gw = [], [], 0, 0
        for i in range(n):  # interleaved, so a busy machine slows both sides alike
            t0 = time.perf_counter()
            s = engine.generate([prompts[i]], max_new_tokens=T, generator=torch.Generator().manual_seed(i), **kw)[0]
            inproc.append(time.perf_counter() - t0)
            tok_in += len(s.token_ids)
            t0 = time.perf_counter()
            r = client.completions.create(model="bench", prompt=prompts[i], max_tokens=T, seed=i)
            served.append(time.perf_counter() - t0)
            tok_gw += len(r.choices[0].model_extra["token_ids"])
        assert tok_in == tok_gw, "the seeded calls sampled different tokens"
        m_in, m_gw = statistics.mean(inproc), statistics.mean(served)
        print(f"sequential  {n} calls x <= {T} new tokens ({tok_in} tokens both ways, seeded: the same tokens)")
        print(f"  in-process engine   {1 / m_in:7.2f} calls/s   {1000 * m_in:7.1f} ms/call")
        print(f"  gateway (HTTP)      {1 / m_gw:7.2f} calls/s   {1000 * m_gw:7.1f} ms/call   "
              f"added {1000 * (m_gw - m_in):+.1f} ms/call ({m_gw / m_in:.2f}x)")

        one_in, one_gw = [], []  # one new token: the HTTP + JSON + rendering cost stands out
        for i in range(n):
            t0 = time.perf_counter()
            engine.generate([prompts[i]], max_new_tokens=1, generator=torch.Generator().manual_seed(i), **kw)
            one_in.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            client.completions.create(model="bench", prompt=prompts[i], max_tokens=1, seed=i)
            one_gw.append(time.perf_counter() - t0)
        o_in, o_gw = statistics.median(one_in), statistics.median(one_gw)
        print(f"  1-token calls (median, interleaved): in-process {1000 * o_in:.1f} ms, gateway {1000 * o_gw:.1f} ms, "
              f"added {1000 * (o_gw - o_in):+.1f} ms/call")

        A, per = args.agents, max(1, n // 2)
        lat: list[float] = []
        lock = threading.Lock()
        b0, r0 = gw.worker.batches, gw.worker.rows

        def agent(k: int) -> None:
            for j in range(per):
                t0 = time.perf_counter()
                client.chat.completions.create(model="bench", messages=msgs[(k * per + j) % len(msgs)], max_tokens=T)
                with lock:
                    lat.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=agent, args=(k,)) for k in range(A)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
        batches, rows = gw.worker.batches - b0, gw.worker.rows - r0
        t1 = time.perf_counter()
        for j in range(per):
            engine.generate(prompts[j * A:(j + 1) * A] or prompts[:A], max_new_tokens=T,
                            generator=torch.Generator().manual_seed(j), **kw)
        wall_in = time.perf_counter() - t1
        print(f"concurrent  {A} agents x {per} chat calls ({A * per} calls)")
        print(f"  gateway             {A * per / wall:7.2f} calls/s   latency p50 {1000 * pct(lat, 0.5):.0f} ms, "
              f"p95 {1000 * pct(lat, 0.95):.0f} ms, max {1000 * max(lat):.0f} ms; mean engine batch {rows / max(1, batches):.1f} rows")
        print(f"  in-process batch {A:<3}{A * per / wall_in:7.2f} calls/s   (the same calls as {per} batches of {A})")
        print(f"  gateway / sequential gateway: {A * per / wall * m_gw:.2f}x calls/s; "
              f"gateway / in-process batches: {(A * per / wall) / (A * per / wall_in):.2f}x")
        print(f"  recorded: {gw.registry.stats()}")
    gw.close()


def engines_arm(args, engine, model, tok, msgs) -> None:
    """`--agents` agents (one episode each, `--calls // 2` unseeded chat calls) against 1 and 2 engine processes."""
    import os

    import openai

    settings = engine_settings(model, tok, threads=args.threads)
    A, per, T = args.agents, max(1, args.calls // 2), args.new_tokens
    gws = {}
    for n in (1, 2):
        pool = EnginePool(lambda i, inc: EngineProcess(i, settings, max_batch=max(16, A), seed=i), n)
        pool.sync(model, 0)
        gws[n] = Gateway(engine, model_name="bench", default_max_tokens=T, max_batch=max(16, A), pool=pool)
    rates: dict[int, list[float]] = {1: [], 2: []}
    lat: dict[int, list[float]] = {1: [], 2: []}
    with ServerThread(gws[1]) as s1, ServerThread(gws[2]) as s2:
        srvs = {1: s1, 2: s2}
        for r in range(-1, args.rounds):  # round -1 warms both
            for n in (1, 2) if r % 2 else (2, 1):
                gw, lock = gws[n], threading.Lock()

                def agent(k: int) -> None:
                    eid = f"r{r}-a{k}"
                    gw.registry.start(eid)
                    with openai.OpenAI(base_url=srvs[n].base_url, api_key="x", max_retries=0, timeout=300) as client:
                        for j in range(per):
                            t0 = time.perf_counter()
                            client.chat.completions.create(model="bench", messages=msgs[(k * per + j) % len(msgs)],
                                                           max_tokens=T, extra_headers={"X-Episode-Id": eid})
                            with lock:
                                if r >= 0:
                                    lat[n].append(time.perf_counter() - t0)

                t0 = time.perf_counter()
                threads = [threading.Thread(target=agent, args=(k,)) for k in range(A)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                if r >= 0:
                    rates[n].append(A * per / (time.perf_counter() - t0))
    n_params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"engines  {A} agents x {per} chat calls, <= {T} new tokens, {args.rounds} alternating rounds; "
          f"{n_params:.2f}M-parameter model; engine "
          f"processes of {args.threads} torch thread(s); {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for n in (1, 2):
        calls = gws[n].pool.calls
        print(f"  {n} engine(s)   {statistics.mean(rates[n]):7.2f} calls/s (rounds: "
              f"{', '.join(f'{x:.2f}' for x in rates[n])})   latency p50 {1000 * pct(lat[n], 0.5):.0f} ms, "
              f"p95 {1000 * pct(lat[n], 0.95):.0f} ms; calls per engine {calls}")
    print(f"  2 engines / 1 engine: {statistics.mean(rates[2]) / statistics.mean(rates[1]):.2f}x calls/s")
    for gw in gws.values():
        gw.close()


if __name__ == "__main__":
    main()
