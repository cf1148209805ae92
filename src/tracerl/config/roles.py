"""The `roles:` section of a recipe: the auxiliary models of an RL algorithm (critic, PRM, teachers).

`config/recipe.py` puts `RolesConfig` into the `Recipe`; `train/aux_roles.py` builds the roles from it, only for the roles the algorithm declares.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tracerl.config.base import Cfg
from tracerl.config.model import DEVICE_PATTERN


class CriticConfig(Cfg):
    path: str | None = None
    """Model the value head sits on: null for a copy of the policy at the start of RL, else a local HF causal
    LM with the run's vocabulary (a tracerl checkpoint directory, for instance)."""
    lr: float = Field(1e-3, gt=0)
    """Critic learning rate (AdamW, constant after a 3-step warm-up)."""
    pretrain_steps: int = Field(0, ge=0)
    """VAPO value pretraining: the first N RL steps train only the critic, on the SFT policy's rollouts."""
    device: str | None = Field(None, pattern=DEVICE_PATTERN)
    """Device of this role's model (auto, cpu, cuda, cuda:N); null is `model.device`."""


class PRMConfig(Cfg):
    lr: float = Field(1e-3, gt=0)
    """Learning rate of the implicit PRM π_φ (initialised from the policy at the start of RL). The paper's is
    twice the policy's (1e-6 vs 5e-7); on text_world at 1e-4 the PRM did not rank rollouts within 12 steps
    (docs/algorithms.md)."""
    device: str | None = Field(None, pattern=DEVICE_PATTERN)
    """Device of this role's model (auto, cpu, cuda, cuda:N); null is `model.device`."""


class TeacherConfig(Cfg):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    """Teacher name; its metrics are `mopd/reverse_kl/<name>`."""
    path: str
    """A local HF causal LM with the run's vocabulary, e.g. `runs/<run>/checkpoints/step_N` of an earlier run."""
    device: str | None = Field(None, pattern=DEVICE_PATTERN)
    """Device of this role's model (auto, cpu, cuda, cuda:N); null is `model.device`."""


class GraderConfig(Cfg):
    path: str | None = None
    """The judge: a local Hugging Face causal LM (a folder, `pkg:<package>` or a cached model id). Give this or
    `url`."""
    url: str | None = Field(None, pattern=r"^https?://")
    """The judge behind an OpenAI-compatible endpoint instead (`http://host:port/v1`: `tracerl serve`, vLLM, a hosted
    API), called with the `openai` client (verifiers/remote_judge.py). Give this or `path`."""
    model: str | None = None
    """The model name sent to `url` (required with it)."""
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Environment variable holding the API key for `url` (null: no key)."""
    gguf_file: str | None = None
    """A GGUF file inside `path`, dequantised on load (as `model.gguf_file`)."""
    mode: Literal["calibrate", "replace"] = "calibrate"
    """`calibrate`: the judge grades every rollout beside the env's verifier (reward unchanged; agreement,
    false-positive and false-negative rates logged as `grader/*`); `replace`: the judge's verdict is the
    reward the policy is trained on (the env's components stay recorded with weight 0)."""
    prompt: str | None = None
    """Judge prompt template with `{question}` and `{response}`; null uses the shipped one. Its SHA-256 is
    in the manifest and in each verdict's trajectory."""
    threshold: float | None = Field(None, gt=0, lt=1)
    """Accept when P(yes) / (P(yes) + P(no)) is at least this; null: the threshold that maximises balanced
    accuracy on the environments' audit sets (chosen before the run, stored in the manifest)."""
    min_auroc: float = Field(0.75, ge=0, le=1)
    """Declared floor: a judge whose AUROC on the audit set (good vs wrong and injected wrong outputs) is
    below this is refused (exit 2, one sentence) before anything is written."""
    min_balanced_accuracy: float = Field(0.7, ge=0, le=1)
    """Declared floor on balanced accuracy at the threshold, likewise."""
    refuse_uncalibrated: bool = True
    """false: a judge that fails its calibration (a floor, or instructions to the judge raising a wrong
    answer above every plain wrong one) is still used, its calibration recorded (measurements, tests)."""
    weight: float = Field(1.0, gt=0)
    """Weight of the `judge` component in `replace` mode."""
    max_response_tokens: int = Field(256, ge=8)
    """Longer responses are cut to their last tokens (counted in `grader/response_cut`)."""
    device: str | None = Field(None, pattern=DEVICE_PATTERN)
    """Device of this role's model (auto, cpu, cuda, cuda:N); null is `model.device`."""

    @model_validator(mode="after")
    def _one_judge(self) -> GraderConfig:
        if (self.path is None) == (self.url is None):
            raise ValueError("roles.grader needs exactly one judge: path (a local model) or url (an OpenAI-compatible "
                             "endpoint, with model)")
        if self.url is not None and not self.model:
            raise ValueError("roles.grader.url needs roles.grader.model, the model name the endpoint serves")
        if self.url is None and (self.model or self.api_key_env):
            raise ValueError("roles.grader.model and api_key_env go with roles.grader.url; drop them for a local path")
        return self

    @property
    def judge_name(self) -> str:
        return self.path if self.path is not None else f"{self.model} at {self.url}"


class RewardModelConfig(Cfg):
    path: str
    """A reward model folder written by `tracerl reward-model PREFS.jsonl --out DIR` (Bradley–Terry, train/reward_model.py)."""
    weight: float = Field(1.0, ge=0)
    """Weight of the `reward_model` component, σ(r) in [0, 1], added beside the env's components (0: recorded only)."""
    min_auroc: float = Field(0.75, ge=0, le=1)
    """Declared floor: a reward model whose AUROC on the environments' audit sets (good vs wrong and injected wrong
    outputs) is below this is refused (exit 2, one sentence) before anything is written."""
    min_balanced_accuracy: float = Field(0.7, ge=0, le=1)
    """Declared floor on balanced accuracy (agreement with the verifier) at the threshold chosen on the audit set."""
    refuse_uncalibrated: bool = True
    """false: a reward model that fails its calibration is still used, its calibration recorded (measurements, tests)."""
    device: str | None = Field(None, pattern=DEVICE_PATTERN)
    """Device of this role's model (auto, cpu, cuda, cuda:N); null is `model.device`."""


class RolesConfig(Cfg):
    critic: CriticConfig | None = None
    """The value model of `ppo`; null uses the defaults when the algorithm needs one. Set for an algorithm
    without a critic it is an error."""
    prm: PRMConfig | None = None
    """PRIME's implicit process reward model; null uses the defaults under `prime`."""
    teachers: list[TeacherConfig] = Field(default_factory=list)
    """Frozen teachers of `mopd` (at least one; names unique)."""
    grader: GraderConfig | None = None
    """A learned grader (a generative judge model) beside any algorithm; see `GraderConfig.mode`."""
    reward_model: RewardModelConfig | None = None
    """A Bradley–Terry reward model (trained from preference pairs) whose σ(score) is the `reward_model` component."""

    @model_validator(mode="after")
    def _one_rollout_scorer(self) -> RolesConfig:
        if self.grader is not None and self.reward_model is not None:
            raise ValueError("roles.grader and roles.reward_model do not combine yet (both score the rollouts at the same "
                             "point); keep one of them")
        return self

    @property
    def critic_or_default(self) -> CriticConfig:
        return self.critic or CriticConfig()

    @property
    def prm_or_default(self) -> PRMConfig:
        return self.prm or PRMConfig()

    def check(self, algorithms: list) -> None:
        """Each role set here is used by some algorithm of the run, and each needed one is given."""
        declared = set().union(*(a.roles() for a in algorithms))
        names = ", ".join(sorted({a.name for a in algorithms}))
        for key, used in (("critic", self.critic is not None), ("prm", self.prm is not None),
                          ("teachers", bool(self.teachers))):
            if used and key not in declared:
                raise ValueError(f"roles.{key} is set but rl.algorithm {names} does not use it; remove roles.{key} "
                                 "or choose an algorithm that does (critic: ppo, prm: prime, teachers: mopd)")
        if "teachers" in declared and not self.teachers:
            raise ValueError("rl.algorithm mopd needs at least one teacher; add roles.teachers: [{name: ..., path: ...}]")
        if len({t.name for t in self.teachers}) != len(self.teachers):
            raise ValueError(f"roles.teachers names must be unique, got {[t.name for t in self.teachers]}")
