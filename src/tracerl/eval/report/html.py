"""`build_report(run_dir)`: report/index.html (self-contained: inline CSS, relative PNGs) + plots.

`build_report(run_a, others=[run_b, ...])` overlays several runs in one page (each series labelled
by its run) and adds a table of their held-out results side by side.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from pathlib import Path
from typing import Any

from tracerl.eval.protocol import read_results
from tracerl.eval.report.episodes import breakdown_series, sample_table
from tracerl.eval.report.plots import RUN_SEP, render_figures
from tracerl.eval.report.series import Series, last_values, load_series

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px auto;max-width:1180px;color:#1d2330;background:#fff}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;border-bottom:1px solid #dde;padding-bottom:4px;margin-top:28px}
.sub{color:#667;font-size:13px}table{border-collapse:collapse;font-size:12.5px;margin:8px 0}
td,th{border:1px solid #dde;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f3f5fa}
td.num{text-align:right;font-variant-numeric:tabular-nums}.fig{margin:14px 0}.fig img{max-width:100%;border:1px solid #eee}
.cap{font-size:12.5px;color:#445}.missing{color:#a60}.gate{background:#fdecea}code{font-size:12px}
.cols{columns:2;column-gap:24px}
"""

SUMMARY_KEYS = ("code.commit", "code.dirty", "config_sha256", "model.path", "env.name", "env.revision",
                "verifier.name", "verifier.revision", "tokenizer.tokenizer_sha256", "tokenizer.chat_template_sha256",
                "tasks.train_sha256", "tasks.heldout_sha256", "truncation_policy", "seeds.run", "packages.tracerl",
                "packages.torch", "hardware.platform", "hardware.cuda")


def _flatten(d: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(d, dict):
        out = []
        for k in sorted(d):
            out += _flatten(d[k], f"{prefix}{k}.")
        return out
    value = json.dumps(d) if isinstance(d, (list, tuple)) else str(d)
    return [(prefix[:-1], value if len(value) <= 160 else value[:157] + "...")]


def _table(header: list[str], rows: list[list[Any]], cls: str = "") -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f'<td class="num">{v:.6g}</td>'
        return f"<td>{html.escape(str(v))}</td>"

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(f'<tr class="{cls}">' + "".join(cell(v) for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


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


def _eval_summary(run_path: Path) -> list[dict[str, Any]]:
    summary = run_path / "summary.json"
    try:
        return json.loads(summary.read_text()).get("evals", []) if summary.exists() else []
    except json.JSONDecodeError:
        return []


def build_comparison(run_dirs: list[str | Path], out: str | Path | None = None, *, smooth: float = 0.0) -> Path:
    """One page overlaying several runs; returns the path of its index.html."""
    paths = [Path(r) for r in run_dirs]
    out = Path(out) if out else paths[0] / "report" / "compare"
    names = [p.name for p in paths]
    if len(set(names)) < len(names):  # two runs of one name: tell them apart by their parent folder
        names = [f"{p.parent.name}/{p.name}" for p in paths]
    series: Series = {}
    labels: dict[str, str] = {}
    for name, path in zip(names, paths):
        for (stage, metric), pts in run_series(path).items():
            series[(f"{name}{RUN_SEP}{stage}", metric)] = pts
        labels |= protocol_labels(path)
    figures = render_figures(series, out, labels=labels, smooth=smooth)
    parts = [f"<h1>tracerl comparison — {html.escape(' vs '.join(names))}</h1>",
             f'<div class="sub">written {_dt.datetime.now().isoformat(timespec="seconds")}; each series is '
             "labelled by its run; held-out numbers compare only within one protocol</div>"]
    rows = [[name, e.get("after", ""), e.get("step", ""), e.get("eval/success", float("nan")),
             labels.get(e.get("protocol", ""), e.get("protocol", ""))]
            for name, path in zip(names, paths) for e in _eval_summary(path)]
    if rows:
        parts.append("<h2>Held-out success</h2>" + _table(["run", "after", "step", "success", "protocol"], rows))
    parts += _figure_html(figures)
    return _write_page(out, " vs ".join(names), parts)


def _figure_html(figures) -> list[str]:
    parts = ["<h2>Plots</h2>"]
    for spec, recorded in figures:
        note = "" if recorded else ' <span class="missing">(not recorded in this run)</span>'
        parts.append(f'<div class="fig"><h3>{html.escape(spec.title)}{note}</h3>'
                     f'<img src="{spec.file}" alt="{html.escape(spec.title)}">'
                     f'<div class="cap">{html.escape(spec.caption)}</div></div>')
    return parts


def _write_page(out: Path, title: str, parts: list[str]) -> Path:
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>tracerl report — "
            f"{html.escape(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(parts) + "</body></html>")
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(page)
    return index


def build_report(run_dir: str | Path, *, smooth: float = 0.0) -> Path:
    """Render the run's report; returns the path of index.html."""
    run_path = Path(run_dir)
    out = run_path / "report"
    series = run_series(run_path)
    labels = protocol_labels(run_path)
    figures = render_figures(series, out, labels=labels, smooth=smooth)
    manifest = json.loads((run_path / "manifest.json").read_text()) if (run_path / "manifest.json").exists() else {}
    events = _events(run_path)
    evals = read_results(run_path)

    parts = [f"<h1>tracerl run report — {html.escape(run_path.name)}</h1>",
             f'<div class="sub">written {_dt.datetime.now().isoformat(timespec="seconds")} from '
             f"{html.escape(str(run_path))}; {len(series)} metric series</div>"]
    gates = [e for e in events if e["kind"] == "gate"]
    if gates:
        parts.append("<h2>Gate tripped</h2>" + _table(
            ["stage", "step", "message"], [[e["stage"], e["step"], e["message"]] for e in gates], "gate"))
    flat = _flatten(manifest)
    parts.append("<h2>Manifest summary</h2>")
    if flat:
        chosen = [r for r in flat if r[0] in SUMMARY_KEYS] or flat[:12]
        parts.append(_table(["key", "value"], [list(r) for r in chosen]))
    else:
        parts.append('<p class="missing">manifest.json not recorded</p>')
    parts += _figure_html(figures)
    from tracerl.eval.report.domains import domain_parts

    parts += domain_parts(run_path, series, out, _table)  # runs over several environments: panels + mixture table
    samples = sample_table(run_path)
    if samples:
        parts.append("<h2>Sample trajectories</h2><div class='sub'>the best and the worst episode (by reward) of "
                     "each of the last RL steps; <code>tracerl inspect RUN --trajectory ID</code> shows one in full</div>"
                     + _table(["step", "", "reward", "correct", "ending", "task", "trajectory", "completion"],
                              [[r["step"], r["which"], r["reward"], "yes" if r["correct"] else "no", r["ending"],
                                r["task"], r["trajectory"], r["completion"]] for r in samples]))
    if evals:
        rows = [[labels.get(e["protocol"].get("column", ""), ""), e["protocol"].get("column", ""),
                 e["protocol"].get("checkpoint_sha256", "")[:12], k, v]
                for e in evals for k, v in sorted(e["results"].items())]
        parts.append("<h2>Stored evaluations</h2><div class='sub'>one protocol column per procedure; "
                     "numbers from different columns are not comparable</div>"
                     + _table(["protocol", "column", "checkpoint", "metric", "value"], rows))
    if events:
        parts.append("<h2>Events</h2>" + _table(
            ["kind", "stage", "step", "message"], [[e["kind"], e["stage"], e["step"], e["message"]] for e in events[-200:]]))
    parts.append("<h2>Last value of every metric</h2><details><summary>show table</summary>"
                 + '<div class="cols">' + _table(["stage", "metric", "step", "value"], [list(r) for r in last_values(series)])
                 + "</div></details>")
    if flat:
        parts.append(f"<h2>Full manifest</h2><details><summary>{len(flat)} entries</summary>"
                     + _table(["key", "value"], [list(r) for r in flat]) + "</details>")
    return _write_page(out, run_path.name, parts)
