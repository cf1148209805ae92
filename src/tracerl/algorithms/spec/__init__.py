"""Algorithm specs: `rl.algorithm: {name: ..., <its parameters>}` in a recipe, validated when it loads.

`AlgorithmConfig` is the discriminated union of every registered algorithm; `ALGORITHMS` maps each
name to its class. Adding an algorithm is one class here (its estimator and defaults) and its pure
functions in `tracerl.algorithms`; the trainer does not change.
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from tracerl.algorithms.spec.base import Algorithm, AlgorithmState, PolicyOutput, StepContext, episode_features
from tracerl.algorithms.spec.critic_free import DAPO, GRPO, RLOO, DrGRPO, ReinforcePP, ReinforcePPBaseline
from tracerl.algorithms.spec.gigpo import GiGPO
from tracerl.algorithms.spec.gspo import GSPO
from tracerl.algorithms.spec.mopd import MOPD
from tracerl.algorithms.spec.ppo import PPO
from tracerl.algorithms.spec.prime import PRIME

_CLASSES = (GRPO, DrGRPO, RLOO, ReinforcePP, ReinforcePPBaseline, DAPO, GSPO, GiGPO, PPO, PRIME, MOPD)
ALGORITHMS: dict[str, type[Algorithm]] = {c.model_fields["name"].default: c for c in _CLASSES}

AlgorithmConfig = Annotated[Union[_CLASSES], Field(discriminator="name")]  # noqa: UP007

__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmConfig", "AlgorithmState", "PolicyOutput", "StepContext",
           "episode_features"]
