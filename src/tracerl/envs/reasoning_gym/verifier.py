"""The reasoning_gym verifier: tracerl's guard, then the package scorer, which must return 1.0.

Evidence: the answer body (str), or None when the episode ended at the invalid-action limit.
Partial scores the package gives are kept in the raw output and never become reward. A scorer that
raises propagates: the environment turns it into an infra failure (never a reward).
"""

from __future__ import annotations

import functools

from tracerl.envs._verify import EnvVerifier
from tracerl.envs.reasoning_gym.families import CONFIGS, guard
from tracerl.errors import UserError
from tracerl.verifiers.registry import register_verifier

NAME = "reasoning_gym.guarded_scorer"


def require_package():
    """Imports `reasoning_gym` or raises one clear sentence naming the fix."""
    try:
        import reasoning_gym
    except ImportError as err:
        raise UserError("the reasoning_gym environment needs the reasoning-gym package; "
                        "install it with: pip install 'tracerl[reasoning]'") from err
    return reasoning_gym


@functools.lru_cache(maxsize=64)
def dataset(family: str, level: int, seed: int = 0, size: int = 1):
    """A reasoning-gym dataset with tracerl's config for (family, level). Scorers read the config
    (e.g. puzzle24's value range), so scoring rebuilds the same dataset the task came from."""
    rg = require_package()
    return rg.create_dataset(family, size=size, seed=seed, **CONFIGS[family][level])


def score(family: str, level: int, answer: str, entry: dict) -> tuple[float, dict]:
    answer = answer.strip()
    rejected = guard(family, answer, entry)
    if rejected is not None:
        return 0.0, {"guard": rejected}
    raw = float(dataset(family, level).score_answer(answer=answer, entry=entry))
    return float(raw >= 1.0), {"package_score": raw}


class ReasoningGymGuardedScorer(EnvVerifier):
    name, revision, env = NAME, "reasoning_gym-guarded-scorer-1", "reasoning_gym"
    components, primary = ("correct",), "correct"

    def __init__(self, scorer=None) -> None:
        self._score = scorer or score

    def score(self, task, evidence):
        if evidence is None:
            return {"correct": 0.0}, {"reason": "no answer"}
        meta = task.metadata
        correct, raw = self._score(meta["family"], int(meta["level"]), str(evidence), meta["entry"])
        return {"correct": float(correct)}, {"scorer": raw}


register_verifier(NAME, ReasoningGymGuardedScorer, replace=True)
