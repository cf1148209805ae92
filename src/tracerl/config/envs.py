"""The `env:` and `envs:` sections of a recipe: one environment and its budgets, or one run over several
environments (Nemotron 3's RL mixture).

    envs:
      - {name: math_tool, share: 0.5, max_turns: 3}
      - {name: code_tests, share: 0.25, reward_weights: {tests: 1.0}}
      - {name: search_qa, share: 0.25, tasks: {sampler: {kind: uniform}}}

Each entry has its own task pool (`tasks`, else the env's generator with `train_tasks` /
`heldout_tasks` / difficulty), sampler, budgets (turns, tokens), reward weights, SFT demonstrations
and held-out tasks; its verifier and audit set are the environment's registered ones. Unset fields
inherit from the recipe's `env:` section (budgets, task counts) or `sft:` / `eval:`. `share` is
the target share of each batch's tasks (normalised over the environments of the stage); a group
is one task's rollouts, so groups never mix environments. An RL stage may name a subset
(`rl.stages[i].envs`): a domain cascade (math → code → tools).

`check_envs` runs when the recipe loads; it also refuses a task source whose environment is not in
the run (the single `env:` form included), which used to crash mid-RL. What `envs:` and `mixture:` do
not combine with (env.name, tasks:, a stage's tasks, an aggregation, dynamic sampling) is refused in
`config/combinations.py`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tracerl.config.base import Cfg
from tracerl.config.tasks import TasksConfig


class EnvConfig(Cfg):
    name: str = "math_tool"
    """Registered environment name (`tracerl envs` lists them)."""
    train_tasks: int = Field(2000, ge=1, le=10**7)
    """Number of generated training tasks."""
    heldout_tasks: int = Field(200, ge=1, le=10**7)
    """Number of generated held-out tasks (never rewarded in training)."""
    train_difficulty: tuple[float, float] = (0.0, 1.0)
    """Difficulty range [low, high] of training tasks (0 easiest, 1 hardest)."""
    heldout_difficulty: tuple[float, float] = (0.0, 1.0)
    """Difficulty range of held-out tasks."""
    max_turns: int = Field(4, ge=1, le=10**4)
    """Policy turns per episode before truncation (max_turns)."""
    max_tokens: int = Field(256, ge=1, le=1 << 24)
    """Total tokens per episode (prompt included) before truncation (max_tokens)."""
    max_new_tokens: int = Field(64, ge=1, le=1 << 24)
    """Tokens the policy may write in one turn."""
    step_timeout_s: float | None = Field(30.0, gt=0)
    """Wall seconds one environment step (a tool call) may take; a slower one ends its episode as an
    infra_failure (the other episodes of the step go on, so one hung tool costs its episode and at most
    this long, not the run). The default is above the sandbox's own per-call wall limit (20 s), so a
    program the sandbox ends stays an observation the policy sees. Null: no deadline."""
    watchdog_s: float | None = Field(None, gt=0, le=86400)
    """A rollout phase (the engine's generate, a turn's env steps) running longer is reported by name; null: off."""
    infra_retries: int = Field(0, ge=0, le=10)
    """An infra_failure episode is played again (fresh reset seed) up to this many times; the final one
    records its attempt number and the ids and reasons of the attempts it replaced (retry_lineage)."""
    tool_format: Literal["grammar", "native"] = "grammar"
    """How the policy calls tools. grammar: tracerl's tags (`<code>...</code>`, envs/grammar.py). native: JSON
    tool calls through the model's chat template (`apply_chat_template(tools=...)`), parsed by
    `tool_parser`, results in the template's `tool` role; checked at run start (docs/tools.md). Applies to
    every environment of the run; each must have a native mode (math_tool)."""
    tool_parser: Literal["hermes", "llama3", "mistral"] = "hermes"
    """The model family's tool-call format in native mode: hermes (`<tool_call>{json}</tool_call>`: Hermes,
    Qwen, SmolLM3 and tracerl's Hermes template), llama3 (a bare `{"name", "parameters"}` turn) or mistral
    (`[TOOL_CALLS][...]`). Only with tool_format: native."""

    @model_validator(mode="after")
    def _native_only(self) -> EnvConfig:
        if self.tool_format == "grammar" and self.tool_parser != "hermes":
            raise ValueError(f"env.tool_parser: {self.tool_parser} has no effect with env.tool_format: grammar; "
                             "set env.tool_format: native or remove env.tool_parser")
        return self

    @model_validator(mode="after")
    def _difficulty_ranges(self) -> EnvConfig:
        for name in ("train_difficulty", "heldout_difficulty"):
            low, high = getattr(self, name)
            if not 0.0 <= low <= high <= 1.0:
                raise ValueError(f"env.{name} must be [low, high] with 0 <= low <= high <= 1, got [{low}, {high}]")
        return self


class EnvEntry(Cfg):
    name: str = Field(min_length=1)
    """Registered environment name (`tracerl envs` lists them); each name once."""
    share: float = Field(1.0, gt=0.0, le=1e6, allow_inf_nan=False)
    """Target share of each RL batch's tasks (normalised over the environments of the stage)."""
    train_tasks: int | None = Field(None, ge=1, le=10**7)
    """Generated training tasks (null: env.train_tasks)."""
    heldout_tasks: int | None = Field(None, ge=1, le=10**7)
    """Generated held-out tasks (null: env.heldout_tasks)."""
    train_difficulty: tuple[float, float] | None = None
    """Difficulty range of training tasks (null: env.train_difficulty)."""
    heldout_difficulty: tuple[float, float] | None = None
    """Difficulty range of held-out tasks (null: env.heldout_difficulty)."""
    max_turns: int | None = Field(None, ge=1, le=10**4)
    """Policy turns per episode (null: env.max_turns)."""
    max_tokens: int | None = Field(None, ge=1, le=1 << 24)
    """Episode length budget, prompt included (null: env.max_tokens)."""
    max_new_tokens: int | None = Field(None, ge=1, le=1 << 24)
    """Tokens per policy turn (null: env.max_new_tokens)."""
    step_timeout_s: float | None = Field(None, gt=0)
    """Wall seconds one env step may take (null: env.step_timeout_s)."""
    reward_weights: dict[str, float] | None = None
    """Weight of each component of the env's verifier (null: the env's own weights)."""
    tasks: TasksConfig | None = None
    """This environment's task pool, filters and sampler (null: its generator, uniform sampler)."""
    demos: int | None = Field(None, ge=0, le=10**7)
    """SFT demonstrations from this env's expert (null: sft.demos × normalised share)."""
    expert_error_rate: float | None = Field(None, ge=0.0, le=1.0)
    """Error rate of this env's scripted expert (null: sft.expert_error_rate, else the env's default)."""
    eval_tasks: int | None = Field(None, ge=1, le=10**7)
    """Held-out tasks evaluated for this env (null: eval.tasks)."""

    @model_validator(mode="after")
    def _ranges(self) -> EnvEntry:
        for name in ("train_difficulty", "heldout_difficulty"):
            rng = getattr(self, name)
            if rng is not None and not 0.0 <= rng[0] <= rng[1] <= 1.0:
                raise ValueError(f"envs[{self.name}].{name} must be [low, high] with 0 <= low <= high <= 1, got {list(rng)}")
        return self


class MixtureConfig(Cfg):
    """Options of a multi-environment run (only with `envs:`)."""

    normalize_rewards: bool = False
    """Divide each environment's rewards by their standard deviation in the batch before the advantage, so
    one domain's large reward scale does not dominate the update (matters for algorithms that do not
    normalise per group: dr_grpo, rloo, reinforce_pp). GRPO's per-group normalisation is unchanged by it."""
    loss_share: Literal["tokens", "episodes"] = "tokens"
    """How a batch's environments share the policy loss. tokens: every action token weighs the same, so
    under token aggregation an environment with long episodes (code) takes more of each update than its
    share of the episodes. episodes: each environment's rows are reweighted (their loss weight, recorded per
    trajectory) so its share of the loss's token weight is its share of the batch's episodes, as in the
    single-environment runs it is compared with. Needs a policy-gradient loss that weighs tokens
    (aggregation token or fixed; not mopd, whose band loss counts kept tokens)."""
    schedule: Literal["mixed", "alternate"] = "mixed"
    """How batches hold the environments. mixed: every batch holds each environment at its target share.
    alternate: every batch holds one environment, and batches take turns so that each environment's share of
    the batches is its target share (a domain's update is then normalised over its own tokens alone, as in a
    single-environment run; per-domain metrics appear at the steps that drew it)."""
    regression_tolerance: float | None = Field(None, gt=0.0, le=1.0)
    """Stop RL cleanly (checkpoint + gate event, exit 3) when any environment's held-out success falls more than
    this below its best so far in the run (needs rl.eval_every > 0)."""


def _generator_envs(tasks: TasksConfig | None) -> list[tuple[int, str]]:
    return [(i, s.env) for i, s in enumerate(tasks.sources if tasks else []) if s.kind == "generator" and s.env]


def _misrouted(where: str, tasks: TasksConfig | None, allowed: set[str], what: str) -> str | None:
    for i, env in _generator_envs(tasks):
        if env not in allowed:
            return (f"{where}.sources.{i} generates {env!r} tasks but {what}; tasks are played by their own "
                    f"environment, so add {env!r} to envs: (each with its own tasks) or remove that source")
    return None


def check_envs(recipe) -> str | None:
    """The first problem with the recipe's environments, as one sentence; None when they are sound: a name
    unknown or given twice, a task source whose environment is not in the run, a stage naming environments
    the run lacks, reward weights of no component. What `envs:` does not combine with is refused in
    `config/combinations.py`."""
    from tracerl.envs.base import env_names

    known = set(env_names())
    stages = recipe.rl.stages
    if not recipe.envs:
        single = {recipe.env.name}
        problem = _misrouted("tasks", recipe.tasks, single, f"the run's environment is {recipe.env.name!r}")
        for k, st in enumerate(stages):
            if st.envs is not None and set(st.envs) != single:
                return (f"rl.stages.{k}.envs names {st.envs} but the run has one environment ({recipe.env.name!r}); "
                        "list several under envs: to change environments between stages")
            problem = problem or _misrouted(f"rl.stages.{k}.tasks", st.tasks, single,
                                            f"the run's environment is {recipe.env.name!r}")
        return problem
    names = [e.name for e in recipe.envs]
    if len(set(names)) != len(names):
        return f"envs lists an environment twice ({names}); give each once, with its share"
    for e in recipe.envs:
        if e.name not in known:
            import difflib

            close = difflib.get_close_matches(e.name, sorted(known), n=1)
            return f"envs names unknown environment {e.name!r}; " + (f"did you mean {close[0]!r}?" if close
                                                                       else f"known: {', '.join(sorted(known))}")
    from tracerl.envs.base import get_env
    from tracerl.verifiers.registry import get_verifier

    for e in recipe.envs:
        problem = _misrouted(f"envs[{e.name}].tasks", e.tasks, {e.name}, f"it is the task pool of {e.name!r}")
        if problem:
            return problem
        if e.reward_weights is not None:
            spec = get_env(e.name)
            comps = set(get_verifier(spec.verifier).components) if spec.verifier else set(spec.reward_weights)
            unknown = sorted(set(e.reward_weights) - comps)
            if unknown or not e.reward_weights:
                return (f"envs[{e.name}].reward_weights names {unknown or 'nothing'}; its verifier produces "
                        f"{sorted(comps)}")
    for k, st in enumerate(stages):
        if st.envs is not None:
            bad = [n for n in st.envs if n not in names]
            if bad or not st.envs:
                return f"rl.stages.{k}.envs names {bad or 'no environment'}; use some of the run's envs: {names}"
    return None


def check_mixture(recipe) -> str | None:
    """The first `mixture:` / `envs:` setting that has no effect or no place in this recipe, as one sentence."""
    if not recipe.envs:
        if recipe.mixture != MixtureConfig():  # by value: a resolved config round-trips
            return "mixture: options apply only to a run over several environments; add envs: or remove mixture:"
    else:
        if recipe.env.name != type(recipe.env)().name:  # by value, so a resolved config round-trips
            return ("the recipe sets both env.name and envs:; with envs: the env section holds only shared budgets, "
                    "so drop env.name")
        if recipe.tasks != TasksConfig():
            return ("with envs: each environment's tasks go under envs[i].tasks; move the recipe-level tasks: "
                    "section there")
        for k, st in enumerate(recipe.rl.stages):
            if st.tasks is not None:
                return (f"rl.stages.{k}.tasks: with envs: a stage picks environments (rl.stages.{k}.envs), each keeps "
                        "its own tasks")
        algo, mixture = recipe.rl.algorithm, recipe.mixture
        if mixture.loss_share == "episodes" and (algo.aggregation == "sequence" or not algo.weighs_rows):
            why = ("aggregation sequence already weighs every episode the same" if algo.aggregation == "sequence"
                   else f"{algo.name}'s loss counts the tokens it keeps, not loss weights")
            return f"mixture.loss_share: episodes has no effect here ({why}); remove it"
        if mixture.schedule == "alternate":
            if mixture.loss_share == "episodes":
                return ("mixture.loss_share: episodes has no effect with mixture.schedule: alternate (each batch holds "
                        "one environment); remove one of them")
            samplers = [recipe.tasks.sampler] + [e.tasks.sampler for e in recipe.envs if e.tasks is not None]
            if algo.dynamic_sampling or any(s.kind == "dynamic" for s in samplers):
                return ("mixture.schedule: alternate draws one environment per batch and does not combine with dynamic "
                        "sampling (tasks.sampler.kind: dynamic, dapo), whose refills would draw another; use "
                        "schedule: mixed")
        if mixture.regression_tolerance is not None and not recipe.rl.eval_every:
            return "mixture.regression_tolerance watches the held-out evaluations during RL; set rl.eval_every > 0"
    return None
