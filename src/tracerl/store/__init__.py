"""The run directory and its SQLite trajectory / metric store (docs/architecture.md, "Configuration and runs")."""

from tracerl.store.rundir import RunDir
from tracerl.store.sqlite import Store

__all__ = ["RunDir", "Store"]
