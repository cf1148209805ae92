"""Generation engines, the multi-turn agent loop and prompt rendering."""

from tracerl.rollout.agent_loop import LoopBudgets, run_episodes
from tracerl.rollout.engine import Sample, TorchEngine

__all__ = ["LoopBudgets", "Sample", "TorchEngine", "run_episodes"]
