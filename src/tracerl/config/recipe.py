"""Typed recipe configuration (docs/architecture.md, "Configuration and runs").

A recipe is a YAML file validated by these pydantic models (`extra="forbid"`; a description on
every field). `Recipe` gathers one section per file of this package; `config/loading.py` reads the
YAML and applies overrides, and `config/combinations.py` refuses, in one sentence, settings of
different sections that do not combine. Derived sizes (episodes per step = prompts × group size)
are computed here, in one place.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tracerl.config.base import Cfg
from tracerl.config.combinations import combination_problem
from tracerl.config.engine import EngineConfig
from tracerl.config.envs import EnvConfig, EnvEntry, MixtureConfig, check_envs, check_mixture
from tracerl.config.eval import EvalConfig
from tracerl.config.faults import FaultsConfig
from tracerl.config.gateway import GatewayConfig
from tracerl.config.gates import GatesConfig
from tracerl.config.learner import LearnerConfig
from tracerl.config.loggers import LoggersConfig
from tracerl.config.model import ModelConfig
from tracerl.config.placement import PlacementConfig, check_placement
from tracerl.config.ray import RayConfig, check_ray
from tracerl.config.reward import RewardConfig, check_reward
from tracerl.config.rl import RLConfig
from tracerl.config.rollout import RolloutConfig, check_rollout
from tracerl.config.roles import RolesConfig
from tracerl.config.run import RunConfig
from tracerl.config.sampling import SamplingConfig
from tracerl.config.sft import SFTConfig, check_sft_source
from tracerl.config.tasks import TasksConfig
from tracerl.sandbox.runtime import SandboxConfig


class Recipe(Cfg):
    run: RunConfig = Field(default_factory=RunConfig)
    """Run name, directory and seed."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """Which model and tokenizer."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """Which environment and its budgets."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    """Rollout sampling parameters."""
    engine: EngineConfig = Field(default_factory=EngineConfig)
    """The rollout engine (torch, hf generate, vllm) and its own weight copy (docs/engines.md)."""
    sft: SFTConfig = Field(default_factory=SFTConfig)
    """Supervised cold start."""
    rl: RLConfig = Field(default_factory=RLConfig)
    """Reinforcement learning stage."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """Held-out evaluation protocol."""
    gates: GatesConfig = Field(default_factory=GatesConfig)
    """Limits that stop RL cleanly (checkpoint saved, event stored, exit code 3); all off by default."""
    loggers: LoggersConfig = Field(default_factory=LoggersConfig)
    """Extra metric sinks (TensorBoard, W&B, MLflow); metrics.jsonl and the store are always written."""
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    """Training task pool, filters, difficulty profile and sampler; no sources means the env's generator."""
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    """Fault injection for tests and benchmarks (tool crash, hang, slow call, garbage output, env
    exception, verifier error rates); every injected fault ends its episode as infra_failure."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """The interpreter sandboxed code runs under (a venv with numpy/sympy) and modules it must import."""
    stages: list[Literal["sft", "eval", "rl", "rft"]] = Field(default_factory=lambda: ["sft", "eval", "rl", "eval"])
    """Stages in order; the model is built or loaded first. `rft` is a rejection-sampled SFT pass
    on the current policy (`sft.rejection`), e.g. `[sft, eval, rft, eval]`."""
    roles: RolesConfig = Field(default_factory=RolesConfig)
    """Auxiliary models of the RL algorithm (critic, PRM, teachers); only the ones it uses may be set."""
    envs: list[EnvEntry] = Field(default_factory=list, max_length=64)
    """Several environments in one run, each with its task pool, budgets, reward weights and batch share
    (`tracerl.config.envs`); empty means the single `env:` environment."""
    mixture: MixtureConfig = Field(default_factory=MixtureConfig)
    """Per-environment reward normalisation and the per-domain regression gate (with `envs:` only)."""
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    """An external OpenAI-client agent trained through the in-process gateway (docs/gateway.md); off by default."""
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    """Learner processes of the RL stage (`ranks`: FSDP2-sharded policy over N gloo ranks; 1: in-process)."""
    ray: RayConfig = Field(default_factory=RayConfig)
    """Ray runtime and the rollout actors' resources (with run.backend: ray; docs/ray.md)."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Rollout engine workers (`workers`: data-parallel engines, sync and async), their seeding and weight sync."""
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    """Where the learner's ranks run (in the trainer, local processes, Ray actors with their resources) and
    the rollout actors' custom Ray resources (config/placement.py, docs/scale.md)."""
    reward: RewardConfig | None = None
    """Your own reward functions over the rows of tasks.sources (config/reward.py): the run's environment is then
    the single-turn `dataset` one; null: the environment's own verifier."""

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data):
        rl = data.get("rl") if isinstance(data, dict) else None
        if isinstance(rl, dict) and "rollout_workers" in rl:  # a config.yaml written before rollout.workers
            n = rl.pop("rollout_workers")
            if n != 1:
                raise ValueError(f"rl.rollout_workers is now rollout.workers; set rollout.workers={n} instead")
        return data

    @model_validator(mode="after")
    def _rollout_fits(self) -> Recipe:
        problem = check_rollout(self)  # rollout.workers against the mode, η and the gateway (config/rollout.py)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _stage_steps(self) -> Recipe:
        if self.rl.stages:
            names = [s.name for s in self.rl.stages]
            if len(set(names)) != len(names):
                raise ValueError(f"rl.stages names must be unique, got {names}")
            object.__setattr__(self.rl, "steps", sum(s.steps for s in self.rl.stages))
        self.roles.check([self.rl.algorithm])
        check_sft_source(self)
        if "faults" in self.eval.slices and not self.faults.active:
            raise ValueError("eval.slices lists faults but no fault rate is set; set e.g. faults.tool_crash=0.1 or drop the slice")
        problem = (check_reward(self) or check_envs(self) or check_mixture(self) or check_ray(self) or check_placement(self)
                   or combination_problem(self))
        if problem:
            raise ValueError(problem)
        if "rl" in self.stages and self.sampling.temperature <= 0:
            raise ValueError(f"RL samples from the policy, so sampling.temperature must be > 0 (got {self.sampling.temperature}); "
                             "greedy decoding belongs to evaluation")
        return self

    @property
    def episodes_per_step(self) -> int:
        return self.rl.prompts_per_step * self.rl.group_size
