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
        Panel("held-out", ("eval/*success", "eval/*avg@*", "eval/*pass@*", "eval/*maj@*")),),
        "Held-out tasks never produce training reward; metric names carry the protocol column."),
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


def _label(stage: str, name: str, stages_of: dict[str, int]) -> str:
    return f"{name} [{stage}]" if stages_of.get(name, 0) > 1 else name


def _draw_panel(ax, panel: Panel, series: Series) -> bool:
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
            ax.bar(steps, heights, bottom=[bottom[s] for s in steps], label=_label(stage, name, stages_of), width=0.8)
            for s, h in zip(steps, heights):
                bottom[s] += h
        ax.set_ylim(0, max(bottom.values(), default=1.0) * 1.35 or 1.0)  # head-room for the legend
    else:
        for (stage, name), pts in chosen.items():
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="." if len(xs) < 40 else None, label=_label(stage, name, stages_of))
    ax.legend(fontsize=7, loc="best")
    return True


def render_figures(series: Series, out_dir: Path) -> list[tuple[Figure, bool]]:
    """Write every figure's PNG; returns (figure, whether any of its metrics was recorded)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for fig_spec in FIGURES:
        fig, axes = plt.subplots(1, len(fig_spec.panels), figsize=(5.2 * len(fig_spec.panels), 3.4), squeeze=False)
        recorded = [_draw_panel(ax, p, series) for ax, p in zip(axes[0], fig_spec.panels)]
        fig.tight_layout()
        fig.savefig(out_dir / fig_spec.file, dpi=90)
        plt.close(fig)
        done.append((fig_spec, any(recorded)))
    return done
