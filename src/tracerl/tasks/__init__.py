"""Task sources, generators, filters, curricula and mixtures (DESIGN.md §2, §4)."""

from tracerl.tasks.task import SPLITS, Task, tasks_sha256

__all__ = ["SPLITS", "Task", "tasks_sha256"]
