"""Task sources, generators, filters, curricula and mixtures (docs/architecture.md, "The layout" and "Tasks and environments").

Entry points: `build_pool` (load, validate, filter), `make_sampler` (uniform / mixture /
curriculum), `dynamic_sample` (non-zero-variance groups), `profile` and `DifficultyProfile`
(pass rates), `reprofile_stage` (drop newly all-pass tasks between stages). See docs/tasks.md.
"""

from tracerl.contract.task import SPLITS, Task, tasks_sha256  # contract data, re-exported (public API)
from tracerl.config.tasks import (CurriculumConfig, DynamicSamplingConfig, FilterConfig, ProfileConfig,  # re-exported
                                  SamplerConfig, TasksConfig, TaskSourceConfig)
from tracerl.tasks.dynamic import DynamicBatch, DynamicReport, dynamic_sample, next_groups, reprofile_stage
from tracerl.tasks.filters import Discard, Ledger, apply_filters
from tracerl.tasks.pipeline import TaskPool, build_pool, make_sampler
from tracerl.tasks.profile import DifficultyProfile, ProfileEntry, profile
from tracerl.tasks.samplers import CurriculumSampler, MixtureSampler, Sampler, UniformSampler
from tracerl.tasks.schema import RowError
from tracerl.tasks.sources import LoadedSource, load_generator, load_source, load_task_file

__all__ = [
    "SPLITS", "CurriculumConfig", "CurriculumSampler", "DifficultyProfile", "Discard", "DynamicBatch",
    "DynamicReport", "DynamicSamplingConfig", "FilterConfig", "Ledger", "LoadedSource", "MixtureSampler",
    "ProfileConfig", "ProfileEntry", "RowError", "Sampler", "SamplerConfig", "Task", "TaskPool", "TaskSourceConfig",
    "TasksConfig", "UniformSampler", "apply_filters", "build_pool", "dynamic_sample", "load_generator",
    "load_source", "load_task_file", "make_sampler", "next_groups", "profile", "reprofile_stage", "tasks_sha256",
]
