"""`tracerl report` on a synthetic run (real store, metrics through step_metrics) and on a bare one."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from tracerl.cli import main
from tracerl.eval.report import FIGURES
from tracerl.store import RunDir

_spec = importlib.util.spec_from_file_location("report_screenshot", Path(__file__).parents[2] / "benchmarks" / "report_screenshot.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    return bench.synthetic_run(tmp_path_factory.mktemp("run"), steps=4)


def test_report_contains_every_plot_and_no_network(run_path, capsys):
    assert main(["report", str(run_path)]) == 0
    assert "index.html" in capsys.readouterr().out
    page = (run_path / "report" / "index.html").read_text()
    for fig in FIGURES:
        png = run_path / "report" / fig.file
        assert png.stat().st_size > 5000, fig.file
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f'src="{fig.file}"' in page
    # self-contained: no external scripts, styles, fonts or images
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "<script" not in page
    assert "gate entropy_floor" in page and "config_sha256" in page and "<details>" in page
    # every panel in this run has data except none: no figure is flagged as unrecorded
    assert "not recorded in this run" not in page
    # held-out numbers carry their protocol column in the metric name and in the stored-evaluation table
    column = json.loads(next(run_path.glob("eval/*/*/protocol.json")).read_text())["column"]
    assert f"eval/{column}/pass@1" in page and "Stored evaluations" in page


def test_report_of_a_bare_run_says_not_recorded(tmp_path):
    run = RunDir(tmp_path / "bare", create=True)
    run.log_metrics({"reward/mean": 0.5}, stage="rl", step=0)
    run.log_metrics({"reward/mean": float("nan")}, stage="rl", step=1)
    run.close()
    with (run.metrics_path).open("a") as f:
        f.write('{"stage": "rl", "step": 2, "reward/me')  # a line cut short by a crash
    assert main(["report", str(run.path)]) == 0
    page = (run.path / "report" / "index.html").read_text()
    assert "manifest.json not recorded" in page
    assert page.count("not recorded in this run") == len(FIGURES) - 1  # only the reward figure has data
    assert all((run.path / "report" / f.file).exists() for f in FIGURES)


def test_report_of_a_non_run_is_a_user_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "has no metrics.jsonl" in capsys.readouterr().err
