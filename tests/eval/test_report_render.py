"""`tracerl report` on a synthetic run (real store, metrics through step_metrics) and on a bare one: one
self-contained HTML file that opens with the before/after table and the gates, draws no empty panel and
loads nothing from the network."""

import importlib.util
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tracerl.cli import main
from tracerl.eval.report.html import asset
from tracerl.store import RunDir

_spec = importlib.util.spec_from_file_location("report_screenshot", Path(__file__).parents[2] / "benchmarks" / "report_screenshot.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

EXTERNAL = re.compile(r"""\b(src|href)\s*=\s*["']?\s*(https?:)?//""", re.I)


class _Outline(HTMLParser):
    """Ids of <main>'s sections and <details> in document order, and every src/href value."""

    def __init__(self):
        super().__init__()
        self.blocks, self.links, self.tables = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("section", "details") and a.get("id"):
            self.blocks.append(a["id"])
        if tag == "table":
            self.tables.append(a.get("id"))
        self.links += [v for k, v in attrs if k in ("src", "href") and v]


def report_data(page: str) -> dict:
    m = re.search(r"<script type='application/json' id='report-data'>(.*?)</script>", page, re.S)
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    return bench.synthetic_run(tmp_path_factory.mktemp("run"), steps=4)


def test_page_is_self_contained_and_opens_with_results(run_path, capsys):
    assert main(["report", str(run_path)]) == 0
    assert "index.html" in capsys.readouterr().out
    assert [p.name for p in (run_path / "report").iterdir()] == ["index.html"]  # one file, no PNG beside it
    page = (run_path / "report" / "index.html").read_text()
    outline = _Outline()
    outline.feed(page)
    # the before/after table is the first section and the first table; the gates come next; provenance is last
    assert outline.blocks[:3] == ["before-after", "gates", "plots-section"]
    assert outline.blocks[-1] == "provenance" and outline.tables[0] == "before-after-table"
    assert page.index("config_sha256") > page.index("id='plots'")  # hashes moved below the plots, collapsed
    # self-contained: no src/href leaves the file, scripts and styles are inline
    assert outline.links == [] and not EXTERNAL.search(page) and "<link" not in page
    assert asset("plot.js") in page and asset("table.js") in page
    # summary.json of the synthetic run: after sft 0.2, after rl 0.45 (seed 0), shown as the console does
    table = page[page.index("id=\"before-after-table\""):page.index("</table>", page.index("before-after-table"))]
    assert re.search(r"<td>sft</td><td>0</td><td class=\"num\">0.2</td>", table)
    assert re.search(r"<td>rl</td><td>4</td><td class=\"num\">0.45</td>", table)
    # gates: entropy_floor tripped (store event), kl_max held with its worst value 0.001·4 = 0.004 at rl step 4
    gates = page[page.index("id=\"gates-table\""):]
    assert re.search(r"entropy_floor</td><td>policy/entropy</td><td>≥ 0.3</td><td>3</td>.*?tripped at step 4", gates)
    assert re.search(r"kl_max</td><td>policy/approx_kl</td><td>≤ 0.5</td><td>1</td><td class=\"num\">0.004</td>"
                     r"<td>4</td><td>held</td>", gates)


def test_plot_data_has_no_empty_panel(run_path):
    main(["report", str(run_path)])
    data = report_data((run_path / "report" / "index.html").read_text())
    assert data["colorBy"] == "series" and [r["name"] for r in data["runs"]] == [run_path.name]
    panels = [p for f in data["figures"] for p in f["panels"]]
    assert panels and all(p["series"] and all(s["pts"] for s in p["series"]) for p in panels)
    by_id = {f["id"]: f for f in data["figures"]}
    assert {"reward", "heldout", "entropy", "time", "sft"} <= set(by_id)
    (reward,) = [s for s in by_id["reward"]["panels"][0]["series"] if s["label"] == "reward/mean"]
    assert [x for x, _ in reward["pts"]] == [1, 2, 3, 4]  # the steps as metrics.jsonl records them (rl step 1..N)
    assert by_id["time"]["panels"][0]["stacked"] is True  # one run: the time breakdown is stacked bars


def test_report_of_a_bare_run_omits_what_was_not_recorded(tmp_path):
    run = RunDir(tmp_path / "bare", create=True)
    run.log_metrics({"reward/mean": 0.5}, stage="rl", step=0)
    run.log_metrics({"reward/mean": float("nan")}, stage="rl", step=1)
    run.close()
    with (run.metrics_path).open("a") as f:
        f.write('{"stage": "rl", "step": 2, "reward/me')  # a line cut short by a crash
    assert main(["report", str(run.path)]) == 0
    page = (run.path / "report" / "index.html").read_text()
    data = report_data(page)
    # only the reward figure, and only its first panel (no reward component was logged); NaN is dropped
    assert [(f["id"], len(f["panels"])) for f in data["figures"]] == [("reward", 1)]
    assert data["figures"][0]["panels"][0]["series"][0]["pts"] == [[0, 0.5]]
    assert "not recorded: Held-out success, By environment" in page
    assert "manifest.json not recorded" in page and "no held-out evaluation recorded" in page
    assert "no gate configured" in page


def test_report_of_a_non_run_is_a_user_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "has no metrics.jsonl" in capsys.readouterr().err


def test_held_out_series_are_kept_apart_by_their_protocol_tag(tmp_path):
    from tracerl.eval.report.series import load_series

    (tmp_path / "metrics.jsonl").write_text(
        '{"stage": "eval", "step": 0, "eval/avg@2": 0.25, "tags": {"eval/protocol": "aaaaaaaaaaaa"}}\n'
        '{"stage": "eval", "step": 0, "eval/avg@2": 0.5, "tags": {"eval/protocol": "bbbbbbbbbbbb"}}\n'
        '{"stage": "eval", "step": 2, "eval/math/avg@2": 0.75, "tags": {"eval/math/protocol": "aaaaaaaaaaaa"}}\n')
    assert load_series(tmp_path) == {("eval", "eval/aaaaaaaaaaaa/avg@2"): [(0, 0.25)],
                                     ("eval", "eval/bbbbbbbbbbbb/avg@2"): [(0, 0.5)],
                                     ("eval", "eval/math/avg@2"): [(2, 0.75)]}


def test_before_after_of_a_run_over_several_environments(tmp_path):
    from tracerl.eval.report.results import before_after

    (tmp_path / "summary.json").write_text(json.dumps({"evals": [
        {"after": "sft", "step": 0, "protocol": {"math": "aaaaaaaaaaaa", "words": "bbbbbbbbbbbb"}, "eval/success": 0.25,
         "eval/math/success": 0.5, "eval/words/success": 0.0, "eval/pass@1": 0.25},
        {"after": "rl step 1", "step": 1, "protocol": {}, "eval/success": 0.3},  # in-RL: not a before/after row
        {"after": "rl", "step": 2, "protocol": {"math": "aaaaaaaaaaaa", "words": "bbbbbbbbbbbb"}, "eval/success": 0.5,
         "eval/math/success": 0.75, "eval/words/success": 0.25, "eval/pass@1": 0.5}]}))
    header, rows = before_after([("r", tmp_path)], {"aaaaaaaaaaaa": "math heldout", "bbbbbbbbbbbb": "words heldout"})
    assert header == ["after", "step", "held-out success", "pass@1", "math success", "words success", "tool calls",
                      "truncation", "infra fail", "protocol"]
    assert rows == [["sft", 0, 0.25, 0.25, 0.5, 0.0, None, None, None, "math heldout; words heldout"],
                    ["rl", 2, 0.5, 0.5, 0.75, 0.25, None, None, None, "math heldout; words heldout"]]
