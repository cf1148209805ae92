"""The report: readable held-out labels, per-environment series, sample trajectories, smoothing, and
`tracerl report RUN_A RUN_B` overlaying two runs."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from tracerl.cli import main
from tracerl.eval.report.episodes import breakdown_series, sample_table
from tracerl.eval.report.html import build_comparison, protocol_labels
from tracerl.eval.report.plots import _label, smoothed

_spec = importlib.util.spec_from_file_location("report_screenshot", Path(__file__).parents[2] / "benchmarks" / "report_screenshot.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def report_data(page: str) -> dict:
    return json.loads(re.search(r"id='report-data'>(.*?)</script>", page, re.S).group(1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return bench.synthetic_run(root, steps=3, seed=0), bench.synthetic_run(root, steps=3, seed=1)


def test_smoothing_is_a_debiased_ema():
    # w = 0.5: s1 = 0.5·1 = 0.5, norm 0.5 → 1.0; s2 = 0.5·0.5 + 0.5·0 = 0.25, norm 0.75 → 1/3
    assert smoothed([(0, 1.0), (1, 0.0)], 0.5) == [(0, 1.0), (1, pytest.approx(1 / 3))]
    assert smoothed([(0, 2.0), (5, 2.0)], 0.9) == [(0, pytest.approx(2.0)), (5, pytest.approx(2.0))]


def test_labels_name_the_protocol_and_the_stage():
    labels = {"abc123def456": "math_tool heldout 20 tasks, n=4, T=1.0"}
    assert _label("eval", "eval/abc123def456/avg@4", {}, labels) == "avg@4 · math_tool heldout 20 tasks, n=4, T=1.0"
    assert _label("rl", "by_source/gsm/success", {}) == "success · gsm (source)"
    assert _label("sft", "loss", {"loss": 2}) == "loss [sft]"  # one name logged in two stages


def test_protocol_labels_and_store_derived_series(runs):
    a, _ = runs
    (label,) = protocol_labels(a).values()
    assert label == "math_tool heldout 20 tasks, n=4, T=1.0"
    series = breakdown_series(a)
    # 3 steps of 4 groups x 4 episodes, all math_tool, task source "arith"
    assert [s for s, _ in series[("rl", "by_env/math_tool/reward")]] == [1, 2, 3]
    assert series[("rl", "by_env/math_tool/success")] == series[("rl", "by_source/arith/success")]
    rows = sample_table(a)
    assert {r["env"] for r in rows} == {"math_tool"}
    assert [(r["step"], r["which"]) for r in rows] == [(1, "best"), (1, "worst"), (2, "best"), (2, "worst"),
                                                       (3, "best"), (3, "worst")]
    assert all(r["reward"] >= w["reward"] for r, w in zip(rows[::2], rows[1::2]))
    assert "<answer>" in rows[0]["completion"]  # decoded with the run's tokenizer


def test_single_report_has_filterable_samples_and_env_panels(runs):
    a, _ = runs
    assert main(["report", str(a), "--smooth", "0.6"]) == 0
    page = (a / "report" / "index.html").read_text()
    data = report_data(page)
    assert "by_env" in {f["id"] for f in data["figures"]}
    # smoothing: the drawn points are the EMA, the raw values ride along to be drawn faintly
    reward = data["figures"][0]["panels"][0]["series"][0]
    assert reward["raw"] and reward["pts"][0] == reward["raw"][0] and reward["pts"][1] != reward["raw"][1]
    assert "math_tool heldout 20 tasks, n=4, T=1.0" in page
    # 3 steps x (best, worst) of one environment: six rows, each with what the filters read
    rows = re.findall(r'<tr data-run="([^"]+)" data-env="([^"]+)" data-reward="([^"]+)" data-ending="([^"]+)">', page)
    assert len(rows) == 6 and {r[1] for r in rows} == {"math_tool"} and {r[3] for r in rows} <= {"eos", "max_tokens"}
    assert 'id="f-env"' in page and 'id="f-ending"' in page and 'id="f-rmin"' in page and 'id="f-run"' not in page


def test_two_runs_overlay_in_one_page_coloured_by_run(runs, tmp_path, capsys):
    a, b = runs
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    page = (tmp_path / "cmp" / "index.html").read_text()
    assert f"{a.name} vs {b.name}" in page
    data = report_data(page)
    assert data["colorBy"] == "run" and [r["name"] for r in data["runs"]] == [a.name, b.name]
    assert data["runs"][0]["color"] != data["runs"][1]["color"]
    # every panel holds series of both runs, and the time breakdown is lines, not one run's stacked bars
    for fig in data["figures"]:
        for panel in fig["panels"]:
            assert {s["run"] for s in panel["series"]} == {0, 1}, (fig["id"], panel["ylabel"])
            assert not panel["stacked"]
    # before/after rows of both runs: after rl 0.45 (seed 0) and 0.55 (seed 1)
    assert re.search(rf"<td>{a.name}</td><td>rl</td><td>3</td><td class=\"num\">0.45</td>", page)
    assert re.search(rf"<td>{b.name}</td><td>rl</td><td>3</td><td class=\"num\">0.55</td>", page)
    assert 'id="f-run"' in page
    index = build_comparison([a, b])
    assert index == a / "report" / "compare" / "index.html"
    assert main(["report", str(a), "--smooth", "1.5"]) == 2
    assert "--smooth 1.5 is out of range" in capsys.readouterr().err
