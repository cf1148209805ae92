"""tracerl: agentic reinforcement learning for language models with an intact chain of evidence."""

import os as _os

# OpenMP threads that spin while waiting make small-model training collapse on a busy 2-core
# machine (measured: 8.2 s vs 0.40 s per SFT step with 2 threads while other jobs ran). Passive
# waiting costs nothing when the machine is idle. Must be set before torch is first imported.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"


def __getattr__(name: str):
    """`tracerl.train(recipe, **overrides)` and `tracerl.Run` (tracerl/api.py), imported on first use."""
    if name == "train":
        import tracerl.train as package  # callable: it runs tracerl.api.train

        return package
    if name == "Run":
        from tracerl.api import Run

        return Run
    raise AttributeError(f"module 'tracerl' has no attribute {name!r}")
