"""The report's per-environment part for runs over several environments (`envs:`): one figure per
environment from its `domain/<env>/*` metrics (drawn with the others, `plots.figure_data`), and the
mixture table (target vs observed share).

A single-environment run records no `domain/*` metric, so this part is empty there.
"""

from __future__ import annotations

import json
from pathlib import Path

from tracerl.eval.report.plots import Figure, Panel
from tracerl.eval.report.series import Series


def domain_names(series: Series) -> list[str]:
    return sorted({name.split("/")[1] for _, name in series if name.startswith("domain/") and name.count("/") == 2})


def domain_figures(names: list[str]) -> list[Figure]:
    return [Figure(f"domain_{n}", f"Environment {n}", (
        Panel("reward / success", (f"domain/{n}/reward", f"domain/{n}/success", f"eval/{n}/success")),
        Panel("rate", (f"domain/{n}/truncation", f"domain/{n}/tool_error_rate", f"domain/{n}/invalid_action_rate",
                       f"domain/{n}/zero_var_frac")),
        Panel("share of the batch", (f"domain/{n}/share_target", f"domain/{n}/share_observed",
                                     f"domain/{n}/share_generated")),
        Panel("action tokens", (f"domain/{n}/length",))),
        f"{n}: training reward and success (trainable episodes), held-out success at the in-RL evaluations, "
        "truncation, tool errors, invalid actions and zero-variance groups, and its share of the batch after "
        "selection next to the generated share and the target.") for n in names]


def _mean(pts) -> float | None:
    return sum(v for _, v in pts) / len(pts) if pts else None


def mixture_rows(run_path: Path, series: Series, names: list[str]) -> list[list]:
    """Per environment: target share, mean observed / generated share over RL steps, reward mean and
    std (the calibration: one domain's scale against the others), SFT demonstrations and their share,
    and held-out success at the first and the last evaluation."""
    sft: dict = {}
    evals: list[dict] = []
    if (run_path / "store.sqlite").exists():
        from tracerl.store.sqlite import Store

        with Store(run_path / "store.sqlite") as store:
            ev = store.events("sft_mixture")
            sft = ev[0]["payload"] if ev else {}
    if (run_path / "summary.json").exists():
        evals = [e for e in json.loads((run_path / "summary.json").read_text()).get("evals", [])]

    def avg(name: str):
        return _mean([p for (stage, n), pts in series.items() if n == name and stage == "rl" for p in pts])

    rows = []
    for n in names:
        first = next((e.get(f"eval/{n}/success") for e in evals if f"eval/{n}/success" in e), None)
        last = next((e.get(f"eval/{n}/success") for e in reversed(evals) if f"eval/{n}/success" in e), None)
        demos = sft.get(n, {})
        rows.append([n, avg(f"domain/{n}/share_target"), avg(f"domain/{n}/share_observed"),
                     avg(f"domain/{n}/share_generated"), avg(f"domain/{n}/reward"), avg(f"domain/{n}/reward_std"),
                     demos.get("demos"), demos.get("share"), first, last])
    return rows


MIXTURE_HEADER = ["environment", "target share", "observed share", "generated share", "reward mean", "reward std",
                  "SFT demos", "SFT share", "held-out first", "held-out last"]


def mixture_section(run_path: Path, series: Series, table) -> str:
    """The mixture table as HTML (nothing for a run over one environment); `table(header, rows)` renders it."""
    names = domain_names(series)
    if not names:
        return ""
    return ("<h2>Environments</h2><div class='sub'>shares are means over RL steps; observed is after selection "
            "(dynamic sampling, RoC), generated before it; reward mean/std per domain is the calibration check "
            "(mixture.normalize_rewards rescales each domain by its std)</div>"
            + table(MIXTURE_HEADER, mixture_rows(run_path, series, names)))
