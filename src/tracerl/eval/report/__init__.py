"""The run report: one self-contained, interactive HTML file (inline SVG plots drawn by assets/plot.js)."""

from tracerl.eval.report.html import build_comparison, build_report
from tracerl.eval.report.plots import FIGURES

__all__ = ["FIGURES", "build_comparison", "build_report"]
