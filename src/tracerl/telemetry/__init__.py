"""Telemetry (docs/architecture.md, "The layout"): metric calculators, gates and loggers.

The trainer calls `step_metrics(...)` once per RL step, passes the result to `MetricLoggers.log`
and to `GateMonitor.update`, and stops on a `GateTrip`. See docs/telemetry.md for every metric's
definition and denominator.
"""

from tracerl.config.gates import GatesConfig, MetricLimit  # the gates: and loggers: sections, re-exported (public API)
from tracerl.config.loggers import LoggersConfig
from tracerl.telemetry.gates import EXIT_CODE, GateMonitor, GateTrip, GateTripped
from tracerl.telemetry.loggers import MetricLoggers
from tracerl.telemetry.step import step_metrics

__all__ = ["EXIT_CODE", "GateMonitor", "GateTrip", "GateTripped", "GatesConfig", "LoggersConfig",
           "MetricLimit", "MetricLoggers", "step_metrics"]
