"""The run report: PNG plots (matplotlib, Agg) and a self-contained report/index.html."""

from tracerl.eval.report.html import build_report
from tracerl.eval.report.plots import FIGURES

__all__ = ["FIGURES", "build_report"]
