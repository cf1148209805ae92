"""Render a run's report and photograph it with headless Chromium, as a person would see it.

    python benchmarks/report_screenshot.py [RUN_DIR ...] [--compare] [--out report.png]

Several RUN_DIRs photograph their comparison page (`tracerl report RUN_A RUN_B`). Without RUN_DIR a
synthetic run is written first (with `--compare`, two of them, seeds 0 and 1) (`synthetic_run`): 12 RL steps of a math-with-a-
tool task whose trajectories, metrics (through `tracerl.telemetry.step_metrics`), held-out
evaluations, events and manifest go through the real store and run-directory code. The screenshot
is checked non-blank: enough non-white pixels and enough distinct colours (the plots' lines).
Needs Debian's `chromium` (apt-get install -y chromium); exits 3 when it is absent.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from tracerl.contract import TerminalReason, TokenRole, Trajectory, ids_sha256, validate
from tracerl.eval.protocol import Protocol, write_results
from tracerl.eval.record import metric_names, protocol_tags
from tracerl.store import RunDir
from tracerl.telemetry import MetricLoggers, step_metrics
from tracerl.telemetry.exploration import tag_classifier, tokenizer_pieces

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def _tokenizer(path: Path):
    from tracerl.models.tiny import build_tokenizer

    texts = [f"What is {a} + {b}? Use <code> to compute. <code>print({a}+{b})</code> <output>{a + b}</output> "
             f"<answer>{a + b}</answer> Let me think." for a in range(10) for b in range(10)]
    tok = build_tokenizer(texts, vocab_size=300, tags=("<code>", "</code>", "<answer>", "</answer>", "<output>", "</output>"))
    tok.save_pretrained(path)
    return tok


def _episode(tok, rng: random.Random, tid: str, group: str, a: int, b: int, *, step: int, p_correct: float) -> Trajectory:
    from tracerl.rollout.render import render_prompt

    t = Trajectory(trajectory_id=tid, group_id=group, task_id=f"add-{a}-{b}", env_name="math_tool",
                   task_source="arith", env_revision="math_tool-env-1", verifier_name="math_tool.verify")
    ids, roles = render_prompt(tok, [{"role": "user", "content": f"What is {a} + {b}? Use <code> to compute."}])
    for i, r in zip(ids, roles):
        t.append([i], r)

    def act(text: str) -> None:
        a_ids = tok(text, add_special_tokens=False)["input_ids"]
        s, e = t.append(a_ids, TokenRole.ACTION, logprobs=[-rng.uniform(0.01, 2.0) for _ in a_ids], policy_version=step)
        t.add_span("action", s, e, sampled_ids_sha256=ids_sha256(a_ids))

    def observe(text: str, status: str, latency: float | None, request: str) -> None:
        o_ids = tok(text, add_special_tokens=False)["input_ids"]
        s, e = t.append(o_ids, TokenRole.OBSERVATION)
        t.add_span("observation", s, e, tool_name="python", tool_status=status, tool_latency_s=latency, tool_request=request)

    correct = rng.random() < p_correct
    answer = a + b if correct else a + b + rng.choice([-1, 1])
    if rng.random() < 0.6:
        code = f"<code>print({a}+{b})</code>"
        act("Let me think. " + code)
        if rng.random() < 0.2:
            observe("<output>error: SyntaxError</output>", "error", rng.uniform(0.05, 0.3), code)
        else:
            observe(f"<output>{a + b}</output>", "ok", rng.uniform(0.05, 0.3), code)
    if rng.random() < 0.08:
        act("Let me think. Let me think.")
        t.set_reward({"correct": 0.0, "format": 0.0}, {"correct": 1.0, "format": 0.1})
        t.finish(TerminalReason.MAX_TOKENS)
    else:
        act(f"<answer>{answer}</answer>")
        t.verifier_output = {"answer": str(answer)}
        t.set_reward({"correct": float(correct), "format": 1.0}, {"correct": 1.0, "format": 0.1})
        t.finish(TerminalReason.EOS)
    return validate(t)


def synthetic_run(root: str | Path, *, steps: int = 12, groups: int = 4, group_size: int = 4, seed: int = 0) -> Path:
    """A small but complete run directory exercising every part the report and inspector read."""
    rng = random.Random(seed)
    run = RunDir(Path(root) / ("synthetic-run" if seed == 0 else f"synthetic-run-seed{seed}"), create=True)
    tok = _tokenizer(run.path / "tokenizer")
    run.write_manifest({"code": {"commit": "0" * 40, "dirty": False}, "config_sha256": "f" * 64,
                        "recipe": "synthetic", "seeds": {"run": seed}, "tokenizer_sha256": "a" * 64,
                        "hardware": {"cpu_count": 2, "cuda": False}})
    run.write_config({"rl": {"steps": steps, "group_size": group_size},
                      "gates": {"entropy_floor": 0.3, "entropy_patience": 3, "kl_max": 0.5}})
    loggers = MetricLoggers(run)
    classify = tag_classifier(tokenizer_pieces(tok))
    protocol = Protocol(checkpoint_sha256="0" * 64, tokenizer_sha256="a" * 64, chat_template_sha256="b" * 64,
                        env_name="math_tool", env_revision="math_tool-env-1", verifier_revision="math_tool-env-1",
                        tasks_sha256="c" * 64, num_tasks=20, sampling={"temperature": 1.0}, budgets={"max_turns": 4},
                        n=4, ks=[1, 4])
    for s in range(6):  # a short supervised cold start before RL
        loggers.log({"sft/loss": 4.0 * math.exp(-s / 2) + 0.3, "sft/lr": 1e-3}, stage="sft", step=s)
    for step in range(1, steps + 1):  # updates are numbered 1..N, as a real run logs and stores them
        trajs = []
        for g in range(groups):
            a, b = rng.randrange(10), rng.randrange(10)
            for m in range(group_size):
                trajs.append(_episode(tok, rng, f"s{step}-g{g}-m{m}", f"s{step}-g{g}", a, b, step=step - 1,
                                      p_correct=0.2 + 0.6 * (step - 1) / steps))
        run.store.add_trajectories(trajs, stage="rl", step=step)
        rewards = np.array([t.reward for t in trajs])
        adv = rewards - np.repeat(rewards.reshape(groups, group_size).mean(1), group_size)
        collapse = 2.0 * math.exp(-(step - 1) / 4)  # entropy decays: the collapse a gate should catch
        entropy = [[collapse * rng.uniform(0.5, 1.5) for _ in range(t.num_action_tokens)] for t in trajs]
        logprobs = [[lp + rng.gauss(0, 0.05 * (1 + (step - 1) / 4)) if not math.isnan(lp) else 0.0
                     for lp in t.behavior_logprobs] for t in trajs]
        metrics = step_metrics(trajs, advantages=adv, token_entropy=entropy, logprobs=logprobs, policy_version=step - 1,
                               classify=classify,
                               loss_stats={"approx_kl": 0.001 * step, "clip_frac_low": 0.01 * rng.random(),
                                           "clip_frac_high": 0.02 + 0.01 * step / steps, "loss": -0.1},
                               timings={"rollout": rng.uniform(3, 4), "verify": 0.4, "learner": rng.uniform(1, 1.5)})
        # what a dynamic-sampling curriculum over two sources reports (train.rl._task_metrics)
        extra = rng.randrange(0, 3)  # zero-variance groups dropped and replaced this step
        metrics |= {"tasks/rounds": 1.0 + (extra > 0), "tasks/groups_generated": float(groups + extra),
                    "tasks/groups_kept": float(groups), "tasks/zero_variance_groups": float(extra),
                    "tasks/curriculum_mean": 0.8 - 0.6 * step / steps, "tasks/share/math": 0.7 + 0.02 * rng.random(),
                    "tasks/target/math": 0.7}
        loggers.log(metrics, stage="rl", step=step)
        if step % 4 == 0:  # eval_every 4: after rl step 4, 8, ...
            ev = {"avg@4": 0.2 + 0.5 * step / steps, "pass@1": 0.2 + 0.5 * step / steps, "pass@4": 0.4 + 0.5 * step / steps}
            run.log_metrics(metric_names(ev), stage="eval", step=step, tags=protocol_tags(protocol))
    write_results(run.path, protocol, {"avg@4": 0.55, "pass@1": 0.55, "pass@4": 0.85})
    # the before/after rows `tracerl train` writes to summary.json (and prints) after SFT and after RL
    ends = [("sft", 0, 0.2), ("rl", steps, 0.45 + 0.1 * seed)]
    (run.path / "summary.json").write_text(json.dumps({"evals": [
        {"after": after, "step": step, "protocol": protocol.column, "eval/success": ok, "eval/pass@1": ok,
         "eval/pass@4": min(1.0, ok + 0.3), "eval/tool_calls_per_episode": 0.6, "eval/truncation_rate": 0.08,
         "eval/infra_failure_rate": 0.0} for after, step, ok in ends]}))
    run.store.add_event("gate", "gate entropy_floor: policy/entropy below the floor 0.3 for 3 consecutive step(s)",
                        stage="rl", step=steps, payload={"gate": "entropy_floor"})
    loggers.close()
    run.close()
    return run.path


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def screenshot(index_html: Path, png: Path, *, width: int = 1280, height: int = 2000, timeout_s: int = 90) -> Path:
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={profile}", f"--screenshot={png.resolve()}", f"--window-size={width},{height}",
               index_html.resolve().as_uri()]
        subprocess.run(cmd, check=True, capture_output=True, timeout=timeout_s)
    return png


def blankness(png: Path) -> dict[str, float]:
    """Share of non-white pixels and number of distinct colours of a screenshot."""
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB"))
    nonwhite = float((img.min(axis=2) < 245).mean())
    colours = len(np.unique(img.reshape(-1, 3)[:: 7], axis=0))
    return {"width": img.shape[1], "height": img.shape[0], "nonwhite_frac": nonwhite, "distinct_colours": colours}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run directories (default: write a synthetic run)")
    ap.add_argument("--compare", action="store_true", help="without RUN_DIR: two synthetic runs, compared")
    ap.add_argument("--out", default=None, help="screenshot file (default REPORT_DIR/screenshot.png)")
    ap.add_argument("--height", type=int, default=2000, help="window height in pixels")
    args = ap.parse_args(argv)
    if find_chromium() is None:
        print("chromium is not installed (apt-get install -y chromium); no screenshot taken", file=sys.stderr)
        return 3
    from tracerl.eval.report.html import build_comparison, build_report

    runs = [Path(r) for r in args.run_dirs]
    if not runs:
        root = tempfile.mkdtemp(prefix="tracerl-report-")
        runs = [synthetic_run(root, seed=s) for s in ((0, 1) if args.compare else (0,))]
    index = build_report(runs[0]) if len(runs) == 1 else build_comparison(runs)
    png = screenshot(index, Path(args.out) if args.out else index.parent / "screenshot.png", height=args.height)
    stats = blankness(png)
    ok = stats["nonwhite_frac"] > 0.02 and stats["distinct_colours"] > 50
    print(f"report {index}\nscreenshot {png}: {stats} -> {'non-blank' if ok else 'BLANK'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
