"""benchmarks/credit.py's per-episode statistics, worked by hand on two text_world-like episodes."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from credit import episode_stats  # noqa: E402
from tests_credit_helpers import episode  # noqa: E402


def test_episode_stats_by_hand():
    # A: s0 → s1 → s0 (a loop back: 1 repeated state) → s2, 4 turns, won
    a = episode("A", "g", ["s0", "s1", "s0", "s2"], [[3], [3], [3], [3]], 1.0)
    a.reward_components = {"success": 1.0}
    # B: s0 → s0 (an invalid action leaves the state: invalid, not a loop), 2 turns, lost
    b = episode("B", "g", ["s0", "s0"], [[3], [3]], 0.0)
    b.reward_components = {"success": 0.0}
    b.spans[-2].tool_status = "invalid_action"  # the observation between B's two turns
    st = episode_stats([a, b])
    # 6 turns in all; loops 1 (A's return to s0) → 1/6; invalid 1 (B) → 1/6; 3 turns per episode; 1 success
    assert st["turns"] == 3.0 and st["env_steps"] == 6.0 and st["successes"] == 1.0
    assert abs(st["repeat_rate"] - 1 / 6) < 1e-12 and abs(st["invalid_rate"] - 1 / 6) < 1e-12
