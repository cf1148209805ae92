"""The report's figures. Each figure names the metrics it draws by glob pattern; `figure_data` turns
them into the JSON the page's plotting script (assets/plot.js) draws. A panel with no recorded metric is
left out, and a figure with no panel left is only named in the list of what was not recorded.
"""

from __future__ import annotations

import dataclasses
from tracerl.eval.report.series import Series, select


@dataclasses.dataclass(frozen=True)
class Panel:
    ylabel: str
    patterns: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    stacked: bool = False  # stacked bars per step (time breakdown)


@dataclasses.dataclass(frozen=True)
class Figure:
    id: str
    title: str
    panels: tuple[Panel, ...]
    caption: str


FIGURES = (
    Figure("reward", "Reward", (
        Panel("reward", ("reward/mean", "reward/success_rate")),
        Panel("raw component mean", ("reward/*",), ("reward/mean", "reward/std", "reward/min", "reward/max", "reward/success_rate"))),
        "Training reward (trainable episodes) and each raw reward component before weighting."),
    Figure("heldout", "Held-out success", (
        Panel("held-out success (avg@n)", ("eval/*/avg@*", "eval/avg@*", "eval/success")),
        Panel("pass@k, k > 1", ("eval/*/pass@*", "eval/pass@*"), ("eval/*/pass@1", "eval/pass@1"))),
        "One series per evaluation protocol, labelled by its environment, task count, samples and temperature "
        "(pass@1 equals avg@n, so it is not drawn twice). Held-out tasks never produce training reward."),
    Figure("by_env", "By environment and task source", (
        Panel("training reward per environment", ("by_env/*/reward",)),
        Panel("training success", ("by_env/*/success", "by_source/*/success"))),
        "Computed from the stored RL episodes (infrastructure failures left out): one series per environment, "
        "and per task source, so a mixture's parts are seen apart."),
    Figure("entropy", "Entropy", (
        Panel("nats (by action type)", ("policy/entropy", "policy/entropy_reasoning", "policy/entropy_tool_call", "policy/entropy_answer")),
        Panel("nats (by advantage sign)", ("policy/entropy_adv_*",))),
        "Mean entropy of generated tokens, stratified by action type and by advantage sign."),
    Figure("kl_clip", "KL and clipping", (
        Panel("KL estimate", ("policy/approx_kl", "policy/kl_*")),
        Panel("fraction of tokens", ("policy/clip_frac_*", "policy/dual_clip_frac"))),
        "Policy movement: KL to the behavior (and reference) policy; clip fractions below and above the band."),
    Figure("ess", "Importance weights", (
        Panel("ESS / eligible tokens", ("is/ess_frac", "policy/ess_frac", "policy/*ess*")),
        Panel("weight", ("is/weight_*",))),
        "Effective sample size of the importance weights and their quantiles."),
    Figure("length", "Response length", (
        Panel("action tokens", ("length/correct_mean", "length/incorrect_mean", "length/p50", "length/p90")),),
        "Generated tokens per episode, split by correctness."),
    Figure("rates", "Truncation and tool errors", (
        Panel("rate", ("rollout/truncation_rate", "tool/error_rate", "env/invalid_action_rate", "groups/zero_var_frac")),
        Panel("per episode / count", ("tool/calls_per_episode", "rollout/infra_failures", "staleness/mean"))),
        "Truncated episodes, tool errors per call, invalid actions per turn, zero-variance groups; infra failures are counted, never rewarded."),
    Figure("tasks", "Task sampling", (
        Panel("groups per step", ("tasks/groups_generated", "tasks/groups_kept", "tasks/zero_variance_groups",
                                  "tasks/rounds")),
        Panel("share / pass rate", ("tasks/share/*", "tasks/target/*", "tasks/curriculum_mean"))),
        "What the sampler drew: groups generated and kept (dynamic sampling), zero-variance groups, "
        "each source's observed share next to its target (mixtures), the curriculum's target pass rate."),
    Figure("sft", "Supervised cold start", (
        Panel("loss", ("sft/loss", "sft/*loss*")),),
        "Cross-entropy on action tokens of the expert demonstrations (the action grammar the RL stage starts from)."),
    Figure("time", "Time breakdown", (
        Panel("seconds per step", ("time/*_s",), stacked=True),
        Panel("generated tokens / s", ("throughput/tokens_per_s",))),
        "Wall time per phase of each step and generation throughput."),
)


def _label(stage: str, name: str, stages_of: dict[str, int], labels: dict[str, str] | None = None) -> str:
    """A series' legend name: held-out metrics by protocol label, breakdowns as "metric · part", and the
    stage when one name was logged in several stages."""
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "eval" and labels and parts[1] in labels:
        name = f"{parts[2]} · {labels[parts[1]]}"
    elif len(parts) == 3 and parts[0] in ("by_env", "by_source"):
        name = f"{parts[2]} · {parts[1]}" + (" (source)" if parts[0] == "by_source" else "")
    return f"{name} [{stage}]" if stages_of.get(name, 0) > 1 else name


def smoothed(pts: list[tuple[int, float]], weight: float) -> list[tuple[int, float]]:
    """Exponential moving average with TensorBoard's convention: s = w·s + (1 − w)·x, debiased."""
    out, s, norm = [], 0.0, 0.0
    for step, x in pts:
        s, norm = weight * s + (1 - weight) * x, weight * norm + (1 - weight)
        out.append((step, s / norm))
    return out


def _points(pts: list[tuple[int, float]]) -> list[list[float]]:
    return [[step, float(f"{v:.6g}")] for step, v in pts]


def panel_data(panel: Panel, runs: list[Series], labels: dict[str, str] | None = None,
               smooth: float = 0.0) -> dict | None:
    """The JSON of one panel over every run (series carry their run's index), or None when no run
    recorded any of its metrics. Stacked bars are for one run; several runs are drawn as lines."""
    chosen = [select(series, list(panel.patterns), list(panel.exclude)) for series in runs]
    stages_of: dict[str, int] = {}
    for key in {k for c in chosen for k in c}:
        stages_of[key[1]] = stages_of.get(key[1], 0) + 1
    out = []
    for run, picked in enumerate(chosen):
        for (stage, name), pts in picked.items():
            entry = {"run": run, "label": _label(stage, name, stages_of, labels), "pts": _points(pts), "raw": None}
            if smooth > 0 and len(pts) > 2 and not name.startswith("eval/") and not panel.stacked:
                entry |= {"pts": _points(smoothed(pts, smooth)), "raw": _points(pts)}
            out.append(entry)
    if not out:
        return None
    return {"ylabel": panel.ylabel, "stacked": panel.stacked and len(runs) == 1, "series": out}


def figure_data(figures: tuple[Figure, ...] | list[Figure], runs: list[Series], *, labels: dict[str, str] | None = None,
                smooth: float = 0.0) -> tuple[list[dict], list[str]]:
    """(figures with at least one recorded panel as JSON, titles of the figures nothing was recorded for).
    `labels` maps a protocol column to a readable name; `smooth` is an EMA weight in [0, 1)."""
    drawn, missing = [], []
    for fig in figures:
        panels = [p for p in (panel_data(panel, runs, labels, smooth) for panel in fig.panels) if p is not None]
        if panels:
            drawn.append({"id": fig.id, "title": fig.title, "caption": fig.caption, "panels": panels})
        else:
            missing.append(fig.title)
    return drawn, missing
