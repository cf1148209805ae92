"""`build_report(run_dir)` and `build_comparison([run_a, run_b, ...])`: one self-contained HTML file.

The page opens with the before/after table of held-out results and the verdict of every gate, then the
interactive plots (assets/plot.js: SVG, hover, drag-to-zoom, run toggles; colour by run when several
runs are compared), the sample episodes (filterable, assets/table.js), stored evaluations and events;
the provenance (manifest hashes) is last, collapsed. CSS, scripts and data are inline: the file opens
offline, with no network request.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from importlib import resources
from pathlib import Path
from typing import Any

from tracerl.eval.protocol import read_results
from tracerl.eval.report.domains import domain_figures, domain_names, mixture_section
from tracerl.eval.report.episodes import breakdown_series, sample_table
from tracerl.eval.report.plots import FIGURES, figure_data
from tracerl.eval.report.results import before_after, gate_verdicts
from tracerl.eval.report.series import Series, last_values, load_series

RUN_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
               "#bcbd22", "#7f7f7f"]  # assets/plot.js draws run i in RUN_COLOURS[i % 10]

SUMMARY_KEYS = ("code.commit", "code.dirty", "config_sha256", "model.path", "env.name", "env.revision",
                "verifier.name", "verifier.revision", "tokenizer.tokenizer_sha256", "tokenizer.chat_template_sha256",
                "tasks.train_sha256", "tasks.heldout_sha256", "truncation_policy", "seeds.run", "packages.tracerl",
                "packages.torch", "hardware.platform", "hardware.cuda")


def asset(name: str) -> str:
    """The text of a file shipped in tracerl/eval/report/assets (package data)."""
    return resources.files("tracerl.eval.report").joinpath("assets", name).read_text(encoding="utf-8")


def _flatten(d: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(d, dict):
        out = []
        for k in sorted(d):
            out += _flatten(d[k], f"{prefix}{k}.")
        return out
    value = json.dumps(d) if isinstance(d, (list, tuple)) else str(d)
    return [(prefix[:-1], value if len(value) <= 160 else value[:157] + "...")]


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f'<td class="num">{v:.6g}</td>'
    return "<td>–</td>" if v is None else f"<td>{html.escape(str(v))}</td>"


def _table(header: list[str], rows: list[list[Any]], attrs: str = "", row_attrs: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(f"<tr{(' ' + row_attrs[i]) if row_attrs else ''}>" + "".join(_cell(v) for v in r) + "</tr>"
                   for i, r in enumerate(rows))
    return f"<table{(' ' + attrs) if attrs else ''}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _events(run_path: Path) -> list[dict[str, Any]]:
    if not (run_path / "store.sqlite").exists():
        return []
    from tracerl.store.sqlite import Store

    with Store(run_path / "store.sqlite") as store:
        return store.events()


def protocol_labels(run_path: Path) -> dict[str, str]:
    """A readable name for each protocol column of a run: environment, split, tasks, n, temperature."""
    by_col: dict[str, dict] = {}
    for e in read_results(run_path):
        p = e.get("protocol", {})
        if p.get("column"):
            by_col[p["column"]] = p
    names = {col: f"{p.get('env_name', '?')} {p.get('split', '')} {p.get('num_tasks', '?')} tasks, n={p.get('n', '?')}, "
                  f"T={p.get('sampling', {}).get('temperature', '?')}" for col, p in by_col.items()}
    clash = {v for v in names.values() if list(names.values()).count(v) > 1}
    return {col: (f"{v} ({col[:6]})" if v in clash else v) for col, v in names.items()}


def run_series(run_path: Path) -> Series:
    return load_series(run_path) | breakdown_series(run_path)


def _run_names(paths: list[Path]) -> list[str]:
    names = [p.name for p in paths]
    if len(set(names)) < len(names):  # two runs of one name: tell them apart by their parent folder
        names = [f"{p.parent.name}/{p.name}" for p in paths]
    return names


def _samples_section(names: list[str], paths: list[Path]) -> str:
    rows = [(name, r) for name, path in zip(names, paths) for r in sample_table(path)]
    if not rows:
        return ""
    several = len(names) > 1

    def select(id_: str, label: str, values: list[str]) -> str:
        opts = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in values)
        return f'<label>{label} <select id="{id_}"><option value="">all</option>{opts}</select></label>'

    filters = (select("f-run", "run", names) if several else "") \
        + select("f-env", "environment", sorted({r["env"] for _, r in rows})) \
        + select("f-ending", "terminal reason", sorted({r["ending"] for _, r in rows})) \
        + '<label>reward ≥ <input id="f-rmin" type="number" step="any"></label>' \
        + '<label>reward ≤ <input id="f-rmax" type="number" step="any"></label>' \
        + '<button id="f-reset" type="button">clear</button><span id="f-count" class="sub"></span>'
    header = (["run"] if several else []) + ["step", "", "environment", "reward", "correct", "ending", "task",
                                             "trajectory", "completion"]
    table_rows = [([name] if several else []) + [r["step"], r["which"], r["env"], r["reward"],
                                                 "yes" if r["correct"] else "no", r["ending"], r["task"],
                                                 r["trajectory"], r["completion"]] for name, r in rows]
    attrs = [f'data-run="{html.escape(name)}" data-env="{html.escape(r["env"])}" data-reward="{r["reward"]!r}" '
             f'data-ending="{html.escape(r["ending"])}"' for name, r in rows]
    return ("<section id='samples-section'><h2>Sample episodes</h2><div class='sub'>the best and the worst episode "
            "(by reward) of each environment in each of the last RL steps; <code>tracerl inspect RUN --trajectory ID"
            f"</code> shows one in full</div><div class='filters'>{filters}</div>"
            + _table(header, table_rows, 'id="samples"', attrs) + "</section>")


def _provenance(names: list[str], manifests: list[dict]) -> str:
    parts = []
    for name, manifest in zip(names, manifests):
        flat = _flatten(manifest)
        parts.append(f"<h3>{html.escape(name)}</h3>")
        if not flat:
            parts.append('<p class="missing">manifest.json not recorded</p>')
            continue
        chosen = [r for r in flat if r[0] in SUMMARY_KEYS] or flat[:12]
        parts.append(_table(["key", "value"], [list(r) for r in chosen])
                     + f"<details><summary>full manifest: {len(flat)} entries</summary>"
                     + _table(["key", "value"], [list(r) for r in flat]) + "</details>")
    return ("<details id='provenance'><summary>Provenance: code, config, data, tokenizer and environment hashes"
            "</summary>" + "".join(parts) + "</details>")


def build_page(paths: list[Path], out: Path, *, smooth: float = 0.0) -> Path:
    """Write out/index.html for one run or several (overlaid); returns its path."""
    names = _run_names(paths)
    series = [run_series(p) for p in paths]
    events = [_events(p) for p in paths]
    labels: dict[str, str] = {}
    for p in paths:
        labels |= protocol_labels(p)
    envs = sorted({n for s in series for n in domain_names(s)})
    figures, missing = figure_data(FIGURES + tuple(domain_figures(envs)), series, labels=labels, smooth=smooth)
    data = {"runs": [{"name": n, "color": RUN_COLOURS[i % len(RUN_COLOURS)]} for i, n in enumerate(names)],
            "colorBy": "run" if len(paths) > 1 else "series", "figures": figures}
    title = " vs ".join(names)
    kind = "comparison" if len(paths) > 1 else "run report"
    runs = list(zip(names, paths))
    ba_header, ba_rows = before_after(runs, labels)
    g_header, g_rows = gate_verdicts(list(zip(names, paths, series, events)))
    g_attrs = [f'class="verdict-{"held" if r[-1] == "held" else "tripped"}"' for r in g_rows]
    parts = [f"<header><h1>tracerl {kind} — {html.escape(title)}</h1><div class='sub'>written "
             f"{_dt.datetime.now().isoformat(timespec='seconds')} from {html.escape(', '.join(map(str, paths)))}; "
             f"{sum(len(s) for s in series)} metric series; held-out numbers compare only within one protocol</div>"
             "</header><main>",
             "<section id='before-after'><h2>Held-out success, before and after</h2>"
             + (_table(ba_header, ba_rows, 'id="before-after-table"') if ba_rows else
                "<p class='missing'>no held-out evaluation recorded (summary.json has none and no "
                "<code>tracerl eval</code> result is stored)</p>") + "</section>",
             "<section id='gates'><h2>Gates</h2>"
             + (_table(g_header, g_rows, 'id="gates-table"', g_attrs) if g_rows else
                "<p class='sub'>no gate configured (recipe <code>gates:</code>) and none tripped</p>") + "</section>",
             "<section id='plots-section'><h2>Plots</h2><div class='sub'>hover for values; drag across a panel to "
             "zoom its steps, double-click or <i>reset zoom</i> to go back; the buttons below hide or show a run in "
             "every panel, a legend entry a series in its panel</div><div id='run-toggles'></div><div id='plots'>"
             "</div><noscript><p class='missing'>the plots need JavaScript</p></noscript>"
             + (f"<p class='sub'>not recorded: {html.escape(', '.join(missing))}</p>" if missing else "")
             + "</section>"]
    parts += [mixture_section(p, s, _table) for p, s in zip(paths, series)]
    parts.append(_samples_section(names, paths))
    evals = [([name] if len(paths) > 1 else []) + [labels.get(e["protocol"].get("column", ""), ""),
                                                    e["protocol"].get("column", ""),
                                                    e["protocol"].get("checkpoint_sha256", "")[:12], k, v]
             for name, p in runs for e in read_results(p) for k, v in sorted(e["results"].items())]
    if evals:
        parts.append("<section id='evaluations'><h2>Stored evaluations</h2><div class='sub'>one protocol column per "
                     "procedure; numbers from different columns are not comparable</div>"
                     + _table((["run"] if len(paths) > 1 else []) + ["protocol", "column", "checkpoint", "metric",
                                                                     "value"], evals) + "</section>")
    ev_rows = [([name] if len(paths) > 1 else []) + [e["kind"], e["stage"], e["step"], e["message"]]
               for name, evs in zip(names, events) for e in evs[-200:]]
    if ev_rows:
        parts.append(f"<details id='events'><summary>Events ({len(ev_rows)})</summary>" + _table(
            (["run"] if len(paths) > 1 else []) + ["kind", "stage", "step", "message"], ev_rows) + "</details>")
    last = [([name] if len(paths) > 1 else []) + list(r) for name, s in zip(names, series) for r in last_values(s)]
    parts.append("<details id='last-values'><summary>Last value of every metric</summary><div class='cols'>"
                 + _table((["run"] if len(paths) > 1 else []) + ["stage", "metric", "step", "value"], last)
                 + "</div></details>")
    manifests = [json.loads((p / "manifest.json").read_text()) if (p / "manifest.json").exists() else {} for p in paths]
    parts.append(_provenance(names, manifests) + "</main>")
    script_data = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    page = ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>tracerl report — "
            f"{html.escape(title)}</title><style>{asset('report.css')}</style></head><body>"
            + "\n".join(p for p in parts if p)
            + f"\n<script type='application/json' id='report-data'>{script_data}</script>"
            + f"\n<script>{asset('plot.js')}</script>\n<script>{asset('table.js')}</script></body></html>")
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def build_report(run_dir: str | Path, *, smooth: float = 0.0) -> Path:
    """Render one run's report to RUN_DIR/report/index.html; returns its path."""
    return build_page([Path(run_dir)], Path(run_dir) / "report", smooth=smooth)


def build_comparison(run_dirs: list[str | Path], out: str | Path | None = None, *, smooth: float = 0.0) -> Path:
    """One page overlaying several runs (default FIRST_RUN/report/compare/index.html); returns its path."""
    paths = [Path(r) for r in run_dirs]
    return build_page(paths, Path(out) if out else paths[0] / "report" / "compare", smooth=smooth)
