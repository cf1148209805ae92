"""Level 3: one external tool (math_tool's sandboxed Python tool), outcome-only credit vs a tool-cost penalty.

From an SFT start of Level 2's sizes (the default recipe's 1.15M model), two arms train RL at each seed, at Level 2's
sizes and steps (its default cell but with std scaling off, `ALGO`: token aggregation, asymmetric clipping,
truncation mask, uniform sampling): `outcome` (rl.tool_cost=0: the reward is the verifier's outcome) and `tool_cost`
(rl.tool_cost = the gate file's level3.tool_cost: each tool call lowers the reward advantages see).

Attempt 3 (attempts 1-2: docs/ladder.md, git history): both arms train with the same transient tool errors
(`TRAIN`: faults.tool_error, each tool call's observation replaced by the error with probability p, the episode
going on), so the policy meets errors it can recover from, for `STEPS` RL steps; error recovery is judged on the
`tool_error_once` slice (the first call errors, calling again works). The old `tool_error` slice (the tool is
down: every call errors) stays in the table, reported only: there the only recovery is answering without the
tool, which this model does right 0.08 of the time, so that slice cannot rise by construction.

Attempt 4: attempt 3's policy never called again after a failed call (its start had never seen a failed call:
Level 2's demonstrations hold none), so RL had no retry to reward. The start is now Level 3's own SFT run,
Level 2's settings plus `sft.expert_error_rate=0.2` (the teacher's first call slips with a SyntaxError in that
fraction of its tool episodes, and it calls again after any failed call; envs/math_tool/env.py `expert`).

Attempt 5: attempt 4's start still never called again after the injected error (tool_error_once 0.010, calls
0.79 per episode): its demonstrations showed retries only after a SyntaxError observation, never after
`Error: the tool is unavailable.`, and they trained the slipped calls themselves (clean success 0.427 -> 0.390).
The start is now Level 2's settings with `SFT_FAULTS` instead of the slips: the demonstrations are played through
the same transient tool errors RL trains with (faults.tool_error, the env wrapped as in RL), so the teacher's
calls are all correct and, where the tool errs, it calls again once. Run it under a new root
(`--root runs/ladder/level3-sft-errors`): a finished run directory is reused whatever its settings.

Attempt 6: attempt 5's SFT start and its evaluation (reused from its JSON: same checkpoint), RL arms with
`faults.tool_error_scope=task` (see `TRAIN`), under `--root runs/ladder/level3-task-errors`.

Attempt 7: attempt 6's settings with 16 prompts per step and lr 2.5e-4 (see `TRAIN`), attempt 5's start and
evaluation reused again, under `--root runs/ladder/level3-bigger-batch`.

Five evaluation slices, every one on the same 200 held-out tasks x 2 samples (difficulty <= 0.5, the
training range), on the SFT start and on every arm and seed:
  * unnecessary: the clean episodes whose problem has ONE operation (math_tool difficulty < 0.25: one
    add / give-away / bags / multiply step on numbers 2..9); the demonstrations' teacher answers these in
    its head, and a direct answer needs no tool (whether THIS model can is reported: its no-tool success);
  * useful: the clean episodes whose problem has two operations (difficulty 0.25..0.5, numbers up to 50);
  * tool_error: `eval.slices` tool_error, every tool observation replaced by an error (the tool is down);
  * tool_error_once: `eval.slices` tool_error_once, the first tool call of each episode errors, later ones work;
  * tool_wrong: `eval.slices` tool_wrong, every integer in a tool observation off by one (plausible lies).
Each slice reports success, tool calls per episode and net success = success - tool_cost x calls.

Gate (reference §10, Level 3): the tool-cost arm's net success on the clean held-out set rises above the
SFT start's (worst seed), its success on the tool_error_once slice rises above the SFT start's (error
recovery, worst seed), and no gradient flows through observation tokens — measured: a stored RL batch
of the run (with tool observations) is scored by the learner's own `score_actions` with the output layer
applied at every position, the algorithm's loss is back-propagated, and the largest |d loss / d logit|
over the logits that predict a token whose loss mask is 0 (observation, prompt/template, padding,
a masked row's action) must be exactly 0 (`observation_grad`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from . import common, gates as G, level2, verifier2

ARMS = ("outcome", "tool_cost")
# Both arms run Level 2's default cell with std scaling OFF (Dr. GRPO's centred advantages). Attempt 1 (commit
# history, docs/ladder.md) ran the shipped std scaling: in a group where every member fails, the 0.1 price is the
# only reward difference and dividing by the group's std turns it into advantages of +1.6..+2.7 for not calling
# the tool, as large as a correct answer's; one seed collapsed to no tool calls (held-out 0.43 -> 0.02).
# Unscaled, the price moves the advantage by what it costs (0.1 per call).
ALGO = ["rl.algorithm.scale=none"]
# Attempt 3: both arms meet transient tool errors in training (30% of calls; the episode goes on), and train
# 30 steps instead of 10 (attempt 2's seeds of one arm moved by +-0.08 after 10 steps, not separating the arms).
# Attempt 6: a group's members had their own error draws (seeded per reset seed), so the members that met an error
# scored below the group mean and every action of theirs, the retry included, got a negative advantage on average
# (attempt 5: retry success in RL fell 0.32 -> 0.16 over 30 steps though every error episode retried). With
# faults.tool_error_scope=task a group's members meet the same errors and the baseline compares them alike.
# Attempt 7: attempt 6 lowered clean success too, in both arms (outcome 0.347-0.367 against the start's 0.420),
# with per-step reward swinging 0.22-0.81 on 8 prompts: the update was too noisy and too large for this start.
# Twice the prompts per step (16 x 8: 30 steps see 480 prompts) and half the lr (2.5e-4, Level 4 attempt 2's fix
# for its collapses), both arms; attempt 5's start and its evaluation (reused).
TRAIN = ["faults.tool_error=0.3", "faults.tool_error_scope=task", "rl.steps=30", "rl.prompts_per_step=16",
         "rl.lr=0.00025"]
SFT_FAULTS = ("faults.tool_error=0.3",)  # attempt 5: demonstrations played through TRAIN's transient tool errors
RECOVERY = "tool_error_once"  # the slice the error-recovery clause is judged on
FAULT_SLICES = ("tool_error", "tool_error_once", "tool_wrong")
EVAL = ["env.heldout_tasks=200", "eval.tasks=200", f"eval.slices=[{', '.join(FAULT_SLICES)}]"]
QUICK = ["rl.steps=2", "eval.tasks=20", "env.heldout_tasks=20"]
_OP = re.compile(r" gets \d+ more\.| gives away \d+\.| gets \d+ bags of \d+\.| are multiplied by \d+\.")


def operations(problem: str) -> int:
    """The operations a math_tool word problem states after its opening 'X has N items.'"""
    return len(_OP.findall(problem))


def slice_of(problem: str) -> str:
    return "unnecessary" if operations(problem) <= 1 else "useful"


def slice_stats(episodes: list[tuple[str, bool, int]], cost: float) -> dict[str, dict[str, float]]:
    """Per slice ('all', 'unnecessary', 'useful') of clean episodes (problem, success, tool calls): episodes,
    success, calls per episode, net success (success - cost x calls), tool-use rate and the success of the
    episodes that answered without the tool."""
    out = {}
    for name in ("all", "unnecessary", "useful"):
        eps = [e for e in episodes if name == "all" or slice_of(e[0]) == name]
        n = len(eps)
        direct = [ok for _, ok, c in eps if c == 0]
        succ = sum(ok for _, ok, _ in eps) / n if n else float("nan")
        calls = sum(c for _, _, c in eps) / n if n else float("nan")
        out[name] = {"episodes": n, "success": succ, "calls": calls, "net": succ - cost * calls,
                     "tool_use_rate": sum(c > 0 for _, _, c in eps) / n if n else float("nan"),
                     "no_tool_episodes": len(direct),
                     "no_tool_success": sum(direct) / len(direct) if direct else float("nan")}
    return out


def fault_slices(ev: dict, cost: float) -> dict[str, dict[str, float]]:
    """tool_error / tool_error_once / tool_wrong from an evaluation's `eval/slice/*` numbers (those it has)."""
    out = {}
    for k in FAULT_SLICES:
        if f"eval/slice/{k}/success" not in ev:
            continue
        s, c = ev[f"eval/slice/{k}/success"], ev[f"eval/slice/{k}/tool_calls_per_episode"]
        out[k] = {"success": s, "calls": c, "net": s - cost * c}
    return out


def clean_episodes(run_dir: Path) -> list[tuple[str, bool, int]]:
    """(problem, success, tool calls) of every stored episode of the run's last held-out evaluation."""
    from tracerl.store.export import records
    from tracerl.store.rundir import RunDir

    recs = list(records(RunDir(run_dir), stage="eval"))
    last = max(r["step"] for r in recs)
    stage = [r["stage"] for r in recs if r["step"] == last][-1]
    return [(verifier2.problem_of(r["prompt_text"]), float((r.get("reward_components") or {}).get("correct", 0.0)) >= 1.0,
             sum(s["kind"] == "observation" and s.get("tool_name") is not None for s in r["spans"]))
            for r in recs if r["stage"] == stage and r["step"] == last]


def measure(run_dir: Path, cost: float) -> dict:
    ev = json.loads((Path(run_dir) / "summary.json").read_text())["evals"][-1]
    slices = slice_stats(clean_episodes(run_dir), cost) | fault_slices(ev, cost)
    if abs(slices["all"]["success"] - ev["eval/success"]) > 1e-9:
        raise AssertionError(f"{run_dir}: stored episodes give {slices['all']['success']}, the run logged {ev['eval/success']}")
    return slices


def run(args, gates: dict, root: Path, results: dict) -> tuple[str, list[G.Check]]:
    cost = G.threshold(gates, "level3", "tool_cost")
    extra = [*level2.QUICK, *QUICK] if args.quick else []
    ckpt = level2.sft_start(args, root, results, SFT_FAULTS)
    if "start" not in results:  # the SFT start on the four slices (its own eval run: Level 2's had no slices)
        r, wall = common.train("default", root / "sft-eval", "run.seed=0", f"model.path={ckpt}", *level2.SIZES,
                               "stages=[eval]", *EVAL, *extra)
        results["start"] = {"slices": measure(r.run_dir, cost), "wall_s": wall}
        args.save()
    results.setdefault("runs", [])
    done = {(x["arm"], x["seed"]) for x in results["runs"]}
    for seed in args.seeds:
        for arm in ARMS:
            if (arm, seed) in done:
                continue
            run_dir = root / f"{arm}-s{seed}"
            r, wall = common.train("default", run_dir, f"run.seed={seed}", f"model.path={ckpt}", *level2.SIZES,
                                   *level2.RL, *ALGO, *TRAIN, *EVAL, f"rl.tool_cost={cost if arm == 'tool_cost' else 0.0}",
                                   *extra)
            m = common.rl_metrics(r)
            row = {"arm": arm, "seed": seed, "slices": measure(r.run_dir, cost), "wall_s": wall, "steps": len(m),
                   "rl_calls_first": m[0].get("tool/calls_per_episode"), "rl_calls_last": m[-1].get("tool/calls_per_episode"),
                   "rl_tool_cost_paid": common.mean(x.get("reward/tool_cost") for x in m) if arm == "tool_cost" else 0.0,
                   "rl_injected_errors": sum(x.get("tool/status_tool_error", 0.0) for x in m),
                   "rl_tool_calls": sum(x.get("tool/calls", 0.0) for x in m),
                   "rl_infra_failures": sum(x.get("rollout/infra_failures", 0.0) for x in m),
                   "checkpoint": str(r.checkpoint)}
            results["runs"].append(row)
            args.save()
            a = row["slices"]["all"]
            print(f"  {arm} seed {seed}: held-out {a['success']:.3f}, calls {a['calls']:.2f}, net {a['net']:.3f}, "
                  f"{RECOVERY} {row['slices'][RECOVERY]['success']:.3f}, {wall:.0f}s", flush=True)
    if "obs_grad" not in results:
        src = next((x for x in results["runs"] if x["arm"] == "tool_cost"), None)
        if src is not None:
            results["obs_grad"] = observation_grad(root / f"tool_cost-s{src['seed']}", src["checkpoint"])
            args.save()
    return table(results), checks(results, gates)


def _per_seed(results: dict, arm: str, key) -> dict[int, float]:
    return {x["seed"]: key(x["slices"]) for x in results.get("runs", []) if x["arm"] == arm}


def table(results: dict) -> str:
    rows = [x["slices"] for x in [results["start"], *results.get("runs", [])] if x] if results.get("start") else []
    cols = [c for c in ("all", "unnecessary", "useful", *FAULT_SLICES) if all(c in r for r in rows)]  # attempts 1-2: no once
    lines = [f"{'slice:':<16}" + "".join(f"{c:^26}" for c in cols),
             f"{'run':<16}" + "".join(f"{'success':>9} {'calls':>6} {'net':>7}  " for _ in cols)]

    def fmt(s):
        return f"{s['success']:>9.3f} {s['calls']:>6.2f} {s['net']:>7.3f}  "
    start = results.get("start")
    if start:
        lines.append(f"{'SFT start':<16}" + "".join(fmt(start["slices"][c]) for c in cols))
    for x in results.get("runs", []):
        lines.append(f"{x['arm'] + ' s' + str(x['seed']):<16}" + "".join(fmt(x["slices"][c]) for c in cols))
    if start:
        u = start["slices"]["unnecessary"]
        lines.append(f"\nslice sizes (SFT start): unnecessary {u['episodes']} episodes, useful "
                     f"{start['slices']['useful']['episodes']}; success without the tool (SFT start): unnecessary "
                     f"{u['no_tool_success']:.3f} of {u['no_tool_episodes']}, useful "
                     f"{start['slices']['useful']['no_tool_success']:.3f} of {start['slices']['useful']['no_tool_episodes']}")
        lines.append("does the policy call the tool to be correct, or because calling is rewarded? "
                     "(mean over seeds; SFT start first)")
        for sl in ("unnecessary", "useful"):
            parts = [f"SFT {start['slices'][sl]['calls']:.2f} calls / {start['slices'][sl]['success']:.3f}"]
            for arm in ARMS:
                rs = [x["slices"][sl] for x in results.get("runs", []) if x["arm"] == arm]
                if rs:
                    parts.append(f"{arm} {common.mean(r['calls'] for r in rs):.2f} calls / "
                                 f"{common.mean(r['success'] for r in rs):.3f} "
                                 f"(no-tool success {common.mean(r['no_tool_success'] for r in rs):.3f})")
            lines.append(f"  {sl:<12} calls per episode / success: " + "; ".join(parts))
    og = results.get("obs_grad")
    if og:
        lines.append(f"\ngradient through the loss-masked logits ({og['episodes']} episodes of RL step {og['step']}, "
                     f"{og['observation_tokens']} observation tokens): max |dL/dlogit| observation {og['observation_max']:.3g}, "
                     f"prompt/template {og['prompt_max']:.3g}, padding/end {og['padding_max']:.3g}, masked actions "
                     f"{og['masked_action_max']:.3g}; at trained actions {og['action_max']:.3g} (must be > 0)")
    return "\n".join(lines)


def checks(results: dict, gates: dict) -> list[G.Check]:
    lv = "level3"
    start = results.get("start", {}).get("slices")
    seeds = min((len(_per_seed(results, arm, lambda s: 0)) for arm in ARMS), default=0)
    net = {s: v - start["all"]["net"] for s, v in _per_seed(results, "tool_cost", lambda x: x["all"]["net"]).items()} if start else {}
    rec = ({s: v - start[RECOVERY]["success"]
            for s, v in _per_seed(results, "tool_cost", lambda x: x[RECOVERY]["success"]).items()} if start and RECOVERY in start else {})
    og = results.get("obs_grad")
    lo = lambda d: min(d.values()) if d else None  # noqa: E731
    ok = og is not None and og["observation_tokens"] > 0 and og["action_max"] > 0  # the measure was live
    return [
        G.at_least("seeds of each arm", seeds, G.threshold(gates, lv, "seeds_min")),
        G.at_least("net success gain (success - tool_cost x calls), tool-cost arm, worst seed", lo(net),
                   G.threshold(gates, lv, "net_gain_min"), "per seed " + " ".join(f"{v:+.3f}" for v in net.values())),
        G.at_least(f"error recovery: {RECOVERY} slice success gain, tool-cost arm, worst seed", lo(rec),
                   G.threshold(gates, lv, "error_recovery_gain_min"), "per seed " + " ".join(f"{v:+.3f}" for v in rec.values())),
        G.at_most("largest |d loss / d logit| at loss-masked positions (observations, prompt, padding)",
                  og["masked_max"] if ok else None, G.threshold(gates, lv, "observation_grad_max"),
                  "" if ok else "not measured on a batch with observations and trained actions"),
    ]


def _logits_tap(model):
    """`model` as `score_actions` sees it without a (decoder, head) split, so it takes the full-logits path (every
    position through the output layer); the module keeps those logits, with their gradient, in `.logits`."""
    import torch

    class Tap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.logits = inner, None

        def forward(self, **kw):
            out = self.inner(**kw)
            out.logits.retain_grad()
            self.logits = out.logits
            return out
    return Tap(model)


def logit_grads(model, batch, rewards_B, algo, ctx, roles: list[list], scoring: dict) -> dict:
    """Back-propagate the algorithm's loss on `batch` (advantages from `rewards_B`) through the learner's scoring
    and return the largest |d loss / d logit| over the logits that predict each kind of token: `action_max`
    (trained actions: loss mask 1) and, for loss mask 0, `observation_max`, `prompt_max` (prompt and template),
    `padding_max` (padding and the last position, which predicts nothing) and `masked_action_max` (actions of
    rows with loss weight 0); `masked_max` is the largest of those. Row t of the logits predicts token t + 1."""
    import torch

    from tracerl.contract import TokenRole
    from tracerl.train.roles import score_actions

    if algo.needs():
        raise ValueError(f"algorithm {algo.name} needs scores {sorted(algo.needs())}; this measure runs on-policy GRPO-like losses")
    tap = _logits_tap(model)
    adv_BT, _ = algo.advantages(batch, rewards_B, {})
    out = score_actions(tap, batch, **scoring, share_prefix=False)
    loss, _ = algo.loss(batch, out, {}, adv_BT, rewards_B, ctx)
    model.zero_grad(set_to_none=True)
    loss.backward()
    g_BT = tap.logits.grad.abs().amax(dim=-1)  # [B, T]
    B, T = g_BT.shape
    pred = torch.zeros((B, T))  # pred[:, j]: the gradient at the logit that predicts token j (j >= 1)
    pred[:, 1:] = g_BT[:, :-1]
    mask = batch.mask_BT
    kind = {"observation": torch.zeros((B, T), dtype=torch.bool), "prompt": torch.zeros((B, T), dtype=torch.bool),
            "padding": torch.ones((B, T), dtype=torch.bool), "masked_action": torch.zeros((B, T), dtype=torch.bool)}
    for i, rs in enumerate(roles):
        for j, r in enumerate(rs):
            kind["padding"][i, j] = False
            if r == TokenRole.OBSERVATION:
                kind["observation"][i, j] = True
            elif r in (TokenRole.PROMPT, TokenRole.TEMPLATE):
                kind["prompt"][i, j] = True
            elif r == TokenRole.ACTION and mask[i, j] == 0:
                kind["masked_action"][i, j] = True
    kind["prompt"][:, 0] = False  # no logit predicts the first token
    last = g_BT[:, -1].max()  # the last position's logit predicts nothing
    res = {f"{k}_max": float(pred[m].max()) if m.any() else 0.0 for k, m in kind.items()}
    res["padding_max"] = max(res["padding_max"], float(last))
    res["masked_max"] = max(res[f"{k}_max"] for k in kind)
    res["action_max"] = float(pred[mask > 0].max()) if (mask > 0).any() else 0.0
    res |= {"observation_tokens": int(kind["observation"].sum()), "episodes": B, "loss": float(loss.detach())}
    return res


def observation_grad(run_dir: Path, checkpoint: str, step: int | None = None) -> dict:
    """`logit_grads` on the run's stored RL batch of `step` (default: its last), under the run's own recipe
    (truncation policy, tool cost, algorithm, sampling) and the model at `checkpoint`."""
    from tracerl.algorithms.batch import collate
    from tracerl.algorithms.spec import StepContext
    from tracerl.config import load_recipe
    from tracerl.models import load_model_and_tokenizer
    from tracerl.store.export import rows
    from tracerl.store.rundir import RunDir

    recipe = load_recipe(str(Path(run_dir) / "config.yaml"))
    stored = [(s, t) for _, s, t in rows(RunDir(run_dir), stage="rl")]
    step = step if step is not None else max(s for s, _ in stored)
    trajs = [t for s, t in stored if s == step]
    model, tok = load_model_and_tokenizer(checkpoint)
    cfg = recipe.rl
    batch = collate(trajs, pad_id=tok.pad_token_id, truncation=cfg.truncation, truncation_penalty=cfg.truncation_penalty,
                    tool_cost=cfg.tool_cost)
    ctx = StepContext(max_tokens=recipe.env.max_tokens)
    rewards, _ = cfg.algorithm.shape_rewards(batch, trajs, ctx)
    scoring = {"temperature": recipe.sampling.temperature, "top_p": recipe.sampling.top_p, "top_k": recipe.sampling.top_k}
    return logit_grads(model, batch, rewards, cfg.algorithm, ctx, [t.roles for t in trajs], scoring) | {"step": step}
