"""Level 1: offline SFT establishes the protocol (SmolLM2-135M-Instruct, math_tool, native JSON tool calls).

One explicit action grammar: tracerl's Hermes template, `<tool_call>{"name": "python", "arguments": {...}}</tool_call>`
turns, the tool's stdout in the template's `tool` role, and a final turn holding the integer alone (the recipe
`math_tool_native_smollm2`, docs/tools.md). Three variants play the SAME held-out tasks under one frozen
protocol (the recipe's sampling, temperature 1.0, 64 new tokens a turn, 3 turns):

- raw: the pretrained model with NO chat template. tracerl's agent loop always renders through a chat template
  (model.chat_template is auto | hermes), so this variant is the smallest loop this module owns (`play_raw`):
  a plain-text prompt (the env's instruction, the tool's schema line and the call format, the task,
  "Answer:"), the same sampler settings, the same env (its parser, sandbox and verifier); a tool result comes
  back as a "Result:" line;
- template: the same model through tracerl's eval stage with the Hermes template, no training;
- sft: the recipe's SFT checkpoint (`stages=[sft, eval]`) through the same eval stage. Attempt 2: its
  demonstrations include failed calls (`SLIPS`, sft.expert_error_rate: the teacher's first call slips with a
  SyntaxError in that fraction of its tool episodes, then it calls again); attempt 1's checkpoint had never seen
  a failed call and wrote the tool-result markup itself after 4 of its 5 (docs/ladder.md).

Six measures per variant, all from the stored held-out episodes (`measures`): exact-format validity, semantic
success, response length, tool-call validity, calibration (confidence = the policy's probability of the final
answer turn it sampled, exp of the summed behaviour log-probs of that turn; 0 when the episode gave no final
answer; ECE over 10 equal bins and Brier), and contamination (held-out prompts among the SFT demonstrations',
normalised; plus a memorisation probe of the pretrained model: its loss on held-out task text minus on the same
text with fresh numbers). Also the copied-observation rate (assistant turns that write tool-result markup).

Gate (reference §10, Level 1): the SFT checkpoint emits parseable actions and valid calls, beats the better
baseline on held-out success, does not write tool outputs as actions, and saw none of the held-out prompts."""

from __future__ import annotations

import json
import math
import random
import re
import time
from pathlib import Path

from . import common, gates as G

RECIPE = "math_tool_native_smollm2"
SLIPS = "sft.expert_error_rate=0.25"  # attempt 2: demonstrations of calling again after a failed call
BASE = ["run.threads=1", "run.seed=0", SLIPS]
EVAL = ["stages=[eval]", "eval.tasks=100", "eval.samples=2", "eval.k=[1,2]"]
QUICK = ["eval.tasks=4", "eval.samples=1", "eval.k=[1]", "sft.demos=16", "sft.epochs=1"]
VARIANTS = (("raw", "raw base, plain text"), ("template", "base + Hermes template"), ("sft", "SFT checkpoint"))
MARKUP = ("<tool_response>", "</tool_response>", "<|im_start|>tool")  # the Hermes template's tool-result markup
RESULT_PREFIX = "Result:"  # how play_raw shows a tool result: a raw turn that writes it copied an observation
RAW_MARKUP = (*MARKUP, RESULT_PREFIX)
_INT = re.compile(r"-?\d{1,12}")  # the final answer's exact format: the integer alone (math_tool's verifier)


# ---------------------------------------------------------------- measures (pure; tests/benchmarks/test_ladder_level1.py)

def schema_ok(call, schemas: list[dict]) -> bool:
    """A parsed call names a declared tool, gives every required argument, no undeclared one, each of its type."""
    types = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}
    for s in schemas:
        f = s["function"]
        if f["name"] != call.name:
            continue
        params = f.get("parameters", {})
        props, args = params.get("properties", {}), call.arguments
        if not set(params.get("required", [])) <= set(args) or not set(args) <= set(props):
            return False
        return all(isinstance(v, types.get(props[k].get("type"), object)) for k, v in args.items())
    return False


def classify_turn(text: str, parser, schemas: list[dict], markup: tuple[str, ...] = MARKUP) -> dict:
    """One assistant turn: `valid` (exactly a schema-valid call, or exactly an integer final answer), `attempt`
    (it tries a call: the parser's open tag, a parsed call or a parse error), `call_ok` (the attempt parses and
    every call matches the schema, whatever text surrounds it), `answer` (no call: a final answer), `copied`."""
    turn = parser.parse(text)
    attempt = bool(turn.calls or turn.error or "<tool_call>" in text)
    call_ok = attempt and not turn.error and bool(turn.calls) and all(schema_ok(c, schemas) for c in turn.calls)
    answer = not attempt
    valid = (call_ok and not turn.content) or (answer and bool(_INT.fullmatch(turn.content.strip())))
    return {"valid": valid, "attempt": attempt, "call_ok": call_ok, "answer": answer,
            "copied": any(m in text for m in markup)}


def ece(conf: list[float], outcome: list[float], bins: int = 10) -> float:
    """Expected calibration error over `bins` equal-width confidence bins: sum over bins of
    (share of episodes in it) * |success rate - mean confidence|; confidence 1.0 falls in the last bin."""
    if not conf:
        return float("nan")
    by: dict[int, list[tuple[float, float]]] = {}
    for c, y in zip(conf, outcome):
        by.setdefault(min(int(c * bins), bins - 1), []).append((c, y))
    return sum(len(b) / len(conf) * abs(sum(y for _, y in b) / len(b) - sum(c for c, _ in b) / len(b)) for b in by.values())


def brier(conf: list[float], outcome: list[float]) -> float:
    return sum((c - y) ** 2 for c, y in zip(conf, outcome)) / len(conf) if conf else float("nan")


def confidence(episode: dict, parser, schemas) -> float:
    """The policy's probability of the final answer turn it sampled; 0 when the episode ended without one."""
    last = episode["turns"][-1] if episode["turns"] else None
    if last is None or not classify_turn(last["text"], parser, schemas)["answer"]:
        return 0.0
    return math.exp(last["logprob"])


def measures(episodes: list[dict], parser, schemas: list[dict], markup: tuple[str, ...] = MARKUP) -> dict:
    """The per-variant numbers from episodes {task_id, correct, turns: [{text, tokens, logprob}]}; `markup`: the
    strings that show a tool result in this variant's prompt (a turn writing one copied an observation)."""
    turns = [classify_turn(t["text"], parser, schemas, markup) for e in episodes for t in e["turns"]]
    attempts = [t for t in turns if t["attempt"]]
    conf = [confidence(e, parser, schemas) for e in episodes]
    ys = [float(e["correct"]) for e in episodes]
    n_turns = max(1, len(turns))
    return {"episodes": len(episodes), "turns": len(turns),
            "format_validity": sum(t["valid"] for t in turns) / n_turns,
            "success": sum(ys) / max(1, len(ys)),
            "tokens_per_episode": sum(t["tokens"] for e in episodes for t in e["turns"]) / max(1, len(episodes)),
            "tokens_per_turn": sum(t["tokens"] for e in episodes for t in e["turns"]) / n_turns,
            "call_attempts": len(attempts),
            "tool_call_validity": sum(t["call_ok"] for t in attempts) / len(attempts) if attempts else None,
            "calls_per_episode": len(attempts) / max(1, len(episodes)),
            "copied_observation": sum(t["copied"] for t in turns) / n_turns,
            "ece": ece(conf, ys), "brier": brier(conf, ys), "confidence_mean": sum(conf) / max(1, len(conf))}


def normalise(text: str) -> str:
    """Lower case, punctuation dropped, whitespace collapsed: the form the contamination probe compares."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def overlap(heldout: list[str], demos: list[str], *, numbers: bool = True) -> float:
    """Fraction of held-out prompts whose normalised form (numbers replaced by # when `numbers` is False:
    the template probe) is among the demonstrations'."""
    key = (lambda s: normalise(s)) if numbers else (lambda s: re.sub(r"\d+", "#", normalise(s)))
    seen = {key(d) for d in demos}
    return sum(key(h) in seen for h in heldout) / len(heldout) if heldout else float("nan")


def fresh_numbers(text: str, rng: random.Random) -> str:
    """The same sentence with every integer replaced by another of as many digits (the memorisation control)."""
    def swap(m):
        n, lo = len(m.group()), 10 ** (len(m.group()) - 1) if len(m.group()) > 1 else 0
        choices = [str(v) for v in (rng.randint(max(lo, 2), 10 ** n - 1) for _ in range(8)) if str(v) != m.group()]
        return choices[0] if choices else m.group()
    return re.sub(r"\d+", swap, text)


# ---------------------------------------------------------------- episodes

def stored_episodes(run_dir: Path) -> list[dict]:
    """The held-out episodes an eval stage stored, as {task_id, correct, turns}: each ACTION span's text (its
    tokens decoded with special tokens kept, the end-of-turn token dropped), its length and summed log-prob."""
    from tracerl.store.export import rows, run_tokenizer
    from tracerl.store.rundir import RunDir

    rd = RunDir(run_dir)
    tok = run_tokenizer(rd)
    out = []
    for _, _, t in rows(rd, stage="eval"):
        turns = []
        for s in t.spans:
            if s.kind != "action":
                continue
            ids = list(t.token_ids[s.start:s.end])
            lp = sum(float(x) for x in t.behavior_logprobs[s.start:s.end])
            text_ids = ids[:-1] if ids and ids[-1] == tok.eos_token_id else ids
            turns.append({"text": tok.decode(text_ids), "tokens": len(ids), "logprob": lp})
        out.append({"task_id": t.task_id, "correct": float((t.reward_components or {}).get("correct", 0.0)),
                    "terminal": str(t.terminal_reason), "turns": turns})
    return out


def raw_prompt(system: str, schema_lines: list[str], task: str) -> str:
    call = '<tool_call>{"name": "python", "arguments": {"code": "print(6*7)"}}</tool_call>'
    return (f"{system}\nTool: {schema_lines[0]}\nTo call it, write one line: {call}\n\n"
            f"Question: {task}\nAnswer:")


def _sample_turn(model, tok, ids: list[int], gen, max_new: int) -> tuple[list[int], list[float], str]:
    """Sample one turn at temperature 1 (no top-k/top-p) with a KV cache; it ends at a special token, at a
    line break outside an open <tool_call>, at </tool_call>, or after max_new tokens."""
    import torch

    stops = set(tok.all_special_ids)
    new, lps = [], []
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        for _ in range(max_new):
            logp = torch.log_softmax(out.logits[0, -1].float(), -1)
            t = int(torch.multinomial(logp.exp(), 1, generator=gen))
            new.append(t)
            lps.append(float(logp[t]))
            text = tok.decode([x for x in new if x not in stops])
            if t in stops or "</tool_call>" in text or ("\n" in text.strip() and "<tool_call>" not in text):
                break
            out = model(torch.tensor([[t]]), past_key_values=out.past_key_values, use_cache=True)
    text = tok.decode([x for x in new if x not in stops])
    if "<tool_call>" not in text and "\n" in text.strip():
        text = text.strip().split("\n")[0]
    return new, lps, text


def play_raw(model, tok, env_make, tasks, *, samples: int, seed: int, max_new: int, max_turns: int) -> list[dict]:
    """The raw variant: plain-text episodes of the same env (its parser, sandbox, verifier) with no chat template."""
    import torch

    from tracerl.envs.math_tool.native import SYSTEM

    episodes = []
    for i, task in enumerate(tasks):
        for k in range(samples):
            env = env_make()
            env.reset(task, seed)
            text = raw_prompt(SYSTEM, env.native_tools.schema_lines(), str(task.prompt))
            gen = torch.Generator().manual_seed(seed * 1_000_003 + i * 101 + k)
            turns, correct, terminal = [], 0.0, "max_turns"
            for _ in range(max_turns):
                new, lps, action = _sample_turn(model, tok, tok(text)["input_ids"], gen, max_new)
                turns.append({"text": action, "tokens": len(new), "logprob": sum(lps)})
                step = env.step(action)
                if step.terminated:
                    correct = float((step.reward_components or {}).get("correct", 0.0))
                    terminal = str(step.terminal_reason)
                    break
                text += f" {action.strip()}\n{RESULT_PREFIX} {step.observation}\nAnswer:"
            episodes.append({"task_id": task.id, "correct": correct, "terminal": terminal, "turns": turns})
    return episodes


def memorisation(model, tok, prompts: list[str], seed: int) -> dict:
    """Mean per-token loss of the pretrained model on held-out task text and on the same text with fresh numbers."""
    import torch

    rng = random.Random(f"memo:{seed}")

    def nll(text):
        ids = torch.tensor([tok(text)["input_ids"]])
        with torch.no_grad():
            return float(model(ids, labels=ids).loss)
    held = [nll(p) for p in prompts]
    fresh = [nll(fresh_numbers(p, rng)) for p in prompts]
    return {"heldout_nll": common.mean(held), "fresh_nll": common.mean(fresh),
            "gap": common.mean(held) - common.mean(fresh), "n": len(prompts)}


# ---------------------------------------------------------------- the level

def _recipe(*overrides: str):
    from tracerl.api import load

    return load(RECIPE, list(overrides))


def sft_start(args, root: Path, results: dict) -> str:
    """The recipe's SFT checkpoint (`stages=[sft, eval]`), trained here unless root/sft holds a finished run. A
    finished run made elsewhere and copied in is recorded as such, with every setting of its sft/env/model
    sections that differs from what this level would run."""
    if "sft" not in results:
        d = root / "sft"
        over = [*BASE, "stages=[sft, eval]", *(QUICK if args.quick else [])]
        done = d / "summary.json"
        if done.exists() and "wall_s" in json.loads(done.read_text()):
            import yaml

            made = yaml.safe_load((d / "config.yaml").read_text())
            want = _recipe(*over).model_dump(mode="json")
            unused = {"model.tiny"} if made["model"]["path"] and want["model"]["path"] else set()  # no tiny model built
            diff = {f"{s}.{k}": [made[s].get(k), v] for s in ("sft", "env", "model") for k, v in want[s].items()
                    if made[s].get(k) != v and f"{s}.{k}" not in unused}
            results["sft"] = {"wall_s": json.loads(done.read_text())["wall_s"], "made_in": made["run"]["dir"],
                              "threads": made["run"]["threads"], "differs": diff}
        else:
            _, wall = common.train(RECIPE, d, *over)
            results["sft"] = {"wall_s": wall, "made_in": str(d), "threads": 1, "differs": {}}
        results["sft"]["checkpoint"] = str(d / "checkpoints" / "step_0")
        args.save()
    return results["sft"]["checkpoint"]


def run(args, gates: dict, root: Path, results: dict) -> tuple[str, list[G.Check]]:
    import torch

    from tracerl.envs.native_tools import get_parser
    from tracerl.models.load import load_model_and_tokenizer
    from tracerl.run.envs import RunEnvs

    ev = [*BASE, *EVAL, *(QUICK if args.quick else [])]
    ckpt = sft_start(args, root, results)
    results.setdefault("variants", {})
    recipe = _recipe(*ev)
    envs = RunEnvs.load(recipe)
    route = envs.routes[0]
    tasks = envs.heldout[route.name][: recipe.eval.tasks]
    parser, schemas = get_parser(recipe.env.tool_parser), route.spec.make().native_tools.schemas
    for name, model_path in (("template", None), ("sft", ckpt)):
        if name in results["variants"]:
            continue
        checkpoint = [f"model.path={model_path}", "model.gguf_file="] if model_path else []  # the SFT one is no GGUF
        _, wall = common.train(RECIPE, root / f"eval-{name}", *ev, *checkpoint)
        eps = stored_episodes(root / f"eval-{name}")
        _record(results, name, eps, wall, tasks, parser, schemas)
        args.save()
    if "raw" not in results["variants"] or "memorisation" not in results:
        torch.set_num_threads(recipe.run.threads)
        torch.manual_seed(recipe.run.seed)
        model, tok = load_model_and_tokenizer(recipe.model.path, gguf_file=recipe.model.gguf_file)
        model.eval()
        if "raw" not in results["variants"]:
            t0 = time.time()
            eps = play_raw(model, tok, route.spec.make, tasks, samples=recipe.eval.samples, seed=recipe.run.seed,
                           max_new=recipe.env.max_new_tokens, max_turns=recipe.env.max_turns)
            (root / "eval-raw").mkdir(parents=True, exist_ok=True)
            (root / "eval-raw" / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
            _record(results, "raw", eps, time.time() - t0, tasks, parser, schemas, RAW_MARKUP)
            args.save()
        results["memorisation"] = memorisation(model, tok, [str(t.prompt) for t in tasks], recipe.run.seed)
        args.save()
    train_recipe = _recipe(*BASE, *(QUICK if args.quick else []))
    pool = RunEnvs.load(train_recipe).pools[route.name].train[: train_recipe.sft.demos]
    held = [str(t.prompt) for t in tasks]
    results["contamination"] = {
        "exact": overlap(held, [str(t.prompt) for t in pool]),
        "template": overlap(held, [str(t.prompt) for t in pool], numbers=False),
        "heldout": len(held), "demos": len(pool),
        "split": "math_tool decides a problem's split by a hash of its text (20% held out) when it is generated: "
                 "disjoint rows, not source clusters; both splits share the generator's sentence templates"}
    args.save()
    return table(results), checks(results, gates)


def _record(results, name, eps, wall, tasks, parser, schemas, markup=MARKUP) -> None:
    ids = {t.id for t in tasks}
    m = measures(eps, parser, schemas, markup)
    m.update(wall_s=wall, same_tasks=sorted({e["task_id"] for e in eps}) == sorted(ids))
    results["variants"][name] = m


def _f(v, w=7, p=3):
    return f"{'-':>{w}}" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:>{w}.{p}f}"


def table(results: dict) -> str:
    lines = [f"{'variant':<24} {'format':>7} {'success':>7} {'tok/ep':>7} {'tok/turn':>8} {'call ok':>7} "
             f"{'(calls)':>7} {'ECE':>6} {'Brier':>6} {'copied':>7} {'same tasks':>10}"]
    for key, label in VARIANTS:
        v = results.get("variants", {}).get(key)
        if v is None:
            lines.append(f"{label:<24} not run")
            continue
        lines.append(f"{label:<24} {_f(v['format_validity'])} {_f(v['success'])} {_f(v['tokens_per_episode'], 7, 1)} "
                     f"{_f(v['tokens_per_turn'], 8, 1)} {_f(v['tool_call_validity'])} {v['call_attempts']:>7} "
                     f"{_f(v['ece'], 6)} {_f(v['brier'], 6)} {_f(v['copied_observation'])} {str(v['same_tasks']):>10}")
    c, mem = results.get("contamination"), results.get("memorisation")
    if c:
        lines.append(f"contamination: {c['exact']:.3f} of {c['heldout']} held-out prompts among the {c['demos']} SFT "
                     f"demonstrations' (normalised); with numbers masked (template overlap): {c['template']:.3f}")
        lines.append(f"split: {c['split']}")
    if mem:
        lines.append(f"memorisation probe, pretrained model: loss {mem['heldout_nll']:.3f} nats/token on held-out task "
                     f"text vs {mem['fresh_nll']:.3f} with fresh numbers (gap {mem['gap']:+.3f})")
    s = results.get("sft")
    if s and s.get("made_in"):
        lines.append(f"SFT checkpoint: {s['checkpoint']} (made in {s['made_in']}, {s['wall_s']:.0f} s, {s['threads']} "
                     f"thread(s)); settings differing from this level's: {s['differs'] or 'none'}")
    return "\n".join(lines)


def checks(results: dict, gates: dict) -> list[G.Check]:
    lv, v = "level1", results.get("variants", {})
    sft = v.get("sft", {})
    base = [v[k]["success"] for k in ("raw", "template") if k in v]
    gain = sft["success"] - max(base) if sft and len(base) == 2 else None
    c = results.get("contamination", {})
    return [
        G.at_least("SFT exact-format validity (assistant turns)", sft.get("format_validity"),
                   G.threshold(gates, lv, "format_validity_min")),
        G.at_least("SFT tool-call validity (attempted calls)", sft.get("tool_call_validity"),
                   G.threshold(gates, lv, "tool_call_validity_min"), f"{sft.get('call_attempts', 0)} attempts"),
        G.at_least("SFT held-out success minus the better baseline", gain, G.threshold(gates, lv, "success_gain_min"),
                   "baselines " + " ".join(f"{k} {v[k]['success']:.3f}" for k in ("raw", "template") if k in v)),
        G.at_most("SFT copied-observation rate (assistant turns)", sft.get("copied_observation"),
                  G.threshold(gates, lv, "copied_observation_max")),
        G.at_most("held-out prompts among SFT demonstrations (normalised)", c.get("exact"),
                  G.threshold(gates, lv, "contamination_max")),
    ]
