"""The text_world verifier: is the coin in the inventory of the final world state (never the transcript).

Evidence: `{"state": final hidden state, "invalid_actions": int}`.
"""

from __future__ import annotations

from tracerl.envs._verify import EnvVerifier
from tracerl.envs.text_world.world import is_goal
from tracerl.verifiers.registry import register_verifier

NAME = "text_world.goal_state"


class TextWorldGoalState(EnvVerifier):
    name, revision, env = NAME, "text_world-goal-state-1", "text_world"
    components, primary = ("success", "invalid_actions"), "success"

    def score(self, task, evidence):
        goal = float(bool(is_goal(evidence["state"])))
        return {"success": goal, "invalid_actions": float(evidence.get("invalid_actions", 0))}, {}


register_verifier(NAME, TextWorldGoalState, replace=True)
