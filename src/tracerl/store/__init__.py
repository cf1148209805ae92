"""The run directory and its SQLite trajectory / metric store (DESIGN.md §8)."""

from tracerl.store.rundir import RunDir
from tracerl.store.sqlite import Store

__all__ = ["RunDir", "Store"]
