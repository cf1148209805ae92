"""Telemetry (docs/architecture.md, "The layout"): metric calculators, gates and loggers.

The trainer calls `step_metrics(...)` once per RL step, passes the result to `MetricLoggers.log`
and to `GateMonitor.update`, and stops on a `GateTrip`. See docs/telemetry.md for every metric's
definition and denominator.
"""

from tracerl.telemetry.gates import EXIT_CODE, GateMonitor, GatesConfig, GateTrip, GateTripped, MetricLimit
from tracerl.telemetry.loggers import LoggersConfig, MetricLoggers
from tracerl.telemetry.step import step_metrics

__all__ = ["EXIT_CODE", "GateMonitor", "GateTrip", "GateTripped", "GatesConfig", "LoggersConfig",
           "MetricLimit", "MetricLoggers", "step_metrics"]
