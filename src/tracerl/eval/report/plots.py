"""The report's figures. Each figure names the metrics it draws by glob pattern; a panel with no
recorded metric says "not recorded" instead of failing, so any run (or a run cut short) renders.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tracerl.eval.report.series import Series, select


@dataclasses.dataclass(frozen=True)
class Panel:
    ylabel: str
    patterns: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    stacked: bool = False  # stacked bars per step (time breakdown)


@dataclasses.dataclass(frozen=True)
class Figure:
    file: str
    title: str
    panels: tuple[Panel, ...]
    caption: str


FIGURES = (
    Figure("reward.png", "Reward", (
        Panel("reward", ("reward/mean", "reward/success_rate")),
        Panel("raw component mean", ("reward/*",), ("reward/mean", "reward/std", "reward/min", "reward/max", "reward/success_rate"))),
        "Training reward (trainable episodes) and each raw reward component before weighting."),
    Figure("heldout.png", "Held-out success", (
        Panel("held-out success (avg@n)", ("eval/*/avg@*", "eval/success")),
        Panel("pass@k, k > 1", ("eval/*/pass@*",), ("eval/*/pass@1",))),
        "One series per evaluation protocol, labelled by its environment, task count, samples and temperature "
        "(pass@1 equals avg@n, so it is not drawn twice). Held-out tasks never produce training reward."),
    Figure("by_env.png", "By environment and task source", (
        Panel("training reward per environment", ("by_env/*/reward",)),
        Panel("training success", ("by_env/*/success", "by_source/*/success"))),
        "Computed from the stored RL episodes (infrastructure failures left out): one series per environment, "
        "and per task source, so a mixture's parts are seen apart."),
    Figure("entropy.png", "Entropy", (
        Panel("nats (by action type)", ("policy/entropy", "policy/entropy_reasoning", "policy/entropy_tool_call", "policy/entropy_answer")),
        Panel("nats (by advantage sign)", ("policy/entropy_adv_*",))),
        "Mean entropy of generated tokens, stratified by action type and by advantage sign."),
    Figure("kl_clip.png", "KL and clipping", (
        Panel("KL estimate", ("policy/approx_kl", "policy/kl_*")),
        Panel("fraction of tokens", ("policy/clip_frac_*", "policy/dual_clip_frac"))),
        "Policy movement: KL to the behavior (and reference) policy; clip fractions below and above the band."),
    Figure("ess.png", "Importance weights", (
        Panel("ESS / eligible tokens", ("is/ess_frac", "policy/ess_frac", "policy/*ess*")),
        Panel("weight", ("is/weight_*",))),
        "Effective sample size of the importance weights and their quantiles."),
    Figure("length.png", "Response length", (
        Panel("action tokens", ("length/correct_mean", "length/incorrect_mean", "length/p50", "length/p90")),),
        "Generated tokens per episode, split by correctness."),
    Figure("rates.png", "Truncation and tool errors", (
        Panel("rate", ("rollout/truncation_rate", "tool/error_rate", "env/invalid_action_rate", "groups/zero_var_frac")),
        Panel("per episode / count", ("tool/calls_per_episode", "rollout/infra_failures", "staleness/mean"))),
        "Truncated episodes, tool errors per call, invalid actions per turn, zero-variance groups; infra failures are counted, never rewarded."),
    Figure("tasks.png", "Task sampling", (
        Panel("groups per step", ("tasks/groups_generated", "tasks/groups_kept", "tasks/zero_variance_groups",
                                  "tasks/rounds")),
        Panel("share / pass rate", ("tasks/share/*", "tasks/target/*", "tasks/curriculum_mean"))),
        "What the sampler drew: groups generated and kept (dynamic sampling), zero-variance groups, "
        "each source's observed share next to its target (mixtures), the curriculum's target pass rate."),
    Figure("sft.png", "Supervised cold start", (
        Panel("loss", ("sft/loss", "sft/*loss*")),),
        "Cross-entropy on action tokens of the expert demonstrations (the action grammar the RL stage starts from)."),
    Figure("time.png", "Time breakdown", (
        Panel("seconds per step", ("time/*_s",), stacked=True),
        Panel("generated tokens / s", ("throughput/tokens_per_s",))),
        "Wall time per phase of each step and generation throughput."),
)


RUN_SEP = "|"  # series of a comparison are keyed (f"{run}|{stage}", name)


def _label(stage: str, name: str, stages_of: dict[str, int], labels: dict[str, str] | None = None) -> str:
    run, _, stage = stage.rpartition(RUN_SEP)
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "eval" and labels and parts[1] in labels:
        name = f"{parts[2]} · {labels[parts[1]]}"
    elif len(parts) == 3 and parts[0] in ("by_env", "by_source"):
        name = f"{parts[2]} · {parts[1]}" + (" (source)" if parts[0] == "by_source" else "")
    label = f"{name} [{stage}]" if stages_of.get(name, 0) > 1 and not run else name
    return f"{run}: {label}" if run else label


def smoothed(pts: list[tuple[int, float]], weight: float) -> list[tuple[int, float]]:
    """Exponential moving average with TensorBoard's convention: s = w·s + (1 − w)·x, debiased."""
    out, s, norm = [], 0.0, 0.0
    for step, x in pts:
        s, norm = weight * s + (1 - weight) * x, weight * norm + (1 - weight)
        out.append((step, s / norm))
    return out


def _draw_panel(ax, panel: Panel, series: Series, labels: dict[str, str] | None = None, smooth: float = 0.0) -> bool:
    chosen = select(series, list(panel.patterns), list(panel.exclude))
    from matplotlib.ticker import MaxNLocator

    ax.set_ylabel(panel.ylabel)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if not chosen:
        ax.text(0.5, 0.5, "not recorded\n" + "\n".join(panel.patterns), ha="center", va="center",
                transform=ax.transAxes, color="#888", fontsize=9, wrap=True)
        ax.set_xticks([])
        ax.set_yticks([])
        return False
    stages_of: dict[str, int] = {}
    for _, name in chosen:
        stages_of[name] = stages_of.get(name, 0) + 1
    if panel.stacked:
        steps = sorted({s for pts in chosen.values() for s, _ in pts})
        bottom = {s: 0.0 for s in steps}
        for (stage, name), pts in chosen.items():
            vals = dict(pts)
            heights = [vals.get(s, 0.0) for s in steps]
            ax.bar(steps, heights, bottom=[bottom[s] for s in steps], label=_label(stage, name, stages_of, labels),
                   width=0.8)
            for s, h in zip(steps, heights):
                bottom[s] += h
        ax.set_ylim(0, max(bottom.values(), default=1.0) * 1.35 or 1.0)  # head-room for the legend
    else:
        for (stage, name), pts in chosen.items():
            xs, ys = zip(*pts)
            label = _label(stage, name, stages_of, labels)
            if smooth > 0 and len(pts) > 2 and not name.startswith("eval/"):
                line = ax.plot(xs, ys, alpha=0.25)[0]
                ax.plot(xs, [v for _, v in smoothed(pts, smooth)], color=line.get_color(), label=label)
            else:
                ax.plot(xs, ys, marker="." if len(xs) < 40 else None, label=label)
    ax.legend(fontsize=7, loc="best")
    return True


def render_figures(series: Series, out_dir: Path, *, labels: dict[str, str] | None = None,
                   smooth: float = 0.0) -> list[tuple[Figure, bool]]:
    """Write every figure's PNG; returns (figure, whether any of its metrics was recorded).
    `labels` maps a protocol column to a readable name; `smooth` is an EMA weight in [0, 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for fig_spec in FIGURES:
        fig, axes = plt.subplots(1, len(fig_spec.panels), figsize=(5.2 * len(fig_spec.panels), 3.4), squeeze=False)
        recorded = [_draw_panel(ax, p, series, labels, smooth) for ax, p in zip(axes[0], fig_spec.panels)]
        fig.tight_layout()
        fig.savefig(out_dir / fig_spec.file, dpi=90)
        plt.close(fig)
        done.append((fig_spec, any(recorded)))
    return done
