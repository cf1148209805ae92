"""The report page photographed by headless Chromium is not blank (skipped without chromium)."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("report_screenshot", Path(__file__).parents[2] / "benchmarks" / "report_screenshot.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.mark.skipif(bench.find_chromium() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_report_screenshot_is_not_blank(tmp_path):
    from tracerl.eval.report import build_report

    index = build_report(bench.synthetic_run(tmp_path, steps=3))
    png = bench.screenshot(index, tmp_path / "shot.png", height=1400)
    stats = bench.blankness(png)
    # a blank or failed render is white (or one flat colour); the page has text, tables and plots
    assert (stats["width"], stats["height"]) == (1280, 1400)
    assert stats["nonwhite_frac"] > 0.02 and stats["distinct_colours"] > 50, stats


def test_blankness_detects_a_white_page(tmp_path):
    from PIL import Image

    Image.new("RGB", (64, 64), "white").save(tmp_path / "white.png")
    stats = bench.blankness(tmp_path / "white.png")
    assert stats["nonwhite_frac"] == 0.0 and stats["distinct_colours"] == 1
