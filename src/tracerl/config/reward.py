"""The `reward:` section of a recipe: train on your own rows with your own reward functions.

    tasks: {sources: [{path: arith.jsonl, license: MIT}]}
    reward: {funcs: [rewards:correct], weights: [1.0], timeout_s: 5}
    stages: [eval, rl, eval]            # or [sft, eval, rl, eval] with sft.data: demos.jsonl

With `reward:` the run's environment is `dataset` (envs/dataset/): each row's prompt is rendered,
the policy writes one completion, and every function scores it (verifiers/reward_funcs.py). The
functions are resolved, and their signatures checked against the rows' columns, before any rollout.
With `tools` (or `code_tools`) the episode is multi-turn with native tool calls (envs/dataset/tools.py):
env.tool_format becomes native, env.tool_parser reads the calls, env.max_turns bounds the turns.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from tracerl.config.base import Cfg

DATASET_ENV = "dataset"


class RewardConfig(Cfg):
    funcs: list[str] = Field(min_length=1, max_length=32)
    """Reward functions as `module:function` or `path/to/file.py:function`; a module is looked up as a file
    next to the recipe, then in the current directory, then on the Python path. Each is a reward component
    named after the function, called TRL-style (`prompts`, `completions`, each column, `**kwargs`)."""
    weights: list[float] | None = Field(None, max_length=32)
    """One weight per function, in order (reward = Σ weight · value); null: 1.0 each."""
    timeout_s: float = Field(5.0, gt=0.0, le=3600.0, allow_inf_nan=False)
    """Seconds one function call may take; a call past it (or one that raises) makes the episode an
    infra_failure, never a reward of 0."""
    stop_strings: list[str] = Field(default_factory=list, max_length=16)
    """Strings that end a completion (kept at its end, so strip them in the function), e.g. ["\\n"] for the tiny
    model, which never learns an end-of-turn token from SFT; empty: the end-of-turn token or env.max_new_tokens."""
    system_prompt: str | None = Field(None, max_length=100_000)
    """A system message put before each row whose prompt is a string (null: the prompt alone, as the user message)."""
    tools: list[str] = Field(default_factory=list, max_length=32)
    """Tools the policy may call, as `module:function` (looked up like `funcs`): a typed function with a Google-style
    docstring (its JSON schema comes from them), or a JSON-schema dict whose implementation is the module's function
    of the schema's name. Non-empty: the episode is multi-turn (native tool calls through the chat template, parsed
    by env.tool_parser, each result in the `tool` role, up to env.max_turns); each call runs in-process within
    `timeout_s`. Empty: one completion per row."""
    code_tools: list[str] = Field(default_factory=list, max_length=32)
    """Tools that execute code, as `module:function`: the function returns a Python program built from its arguments,
    the sandbox runs it (as math_tool's python tool) and what it prints is the tool result."""

    @property
    def all_tools(self) -> list[str]:
        return [*self.tools, *self.code_tools]

    @model_validator(mode="after")
    def _weights_match(self) -> RewardConfig:
        if self.weights is not None and len(self.weights) != len(self.funcs):
            raise ValueError(f"reward.weights has {len(self.weights)} values for {len(self.funcs)} reward.funcs; "
                             "give one weight per function (or none: 1.0 each)")
        return self

    def weight_list(self) -> list[float]:
        return list(self.weights) if self.weights is not None else [1.0] * len(self.funcs)


def check_reward(r) -> str | None:
    """What a `reward:` recipe cannot combine with, as one sentence; sets env.name to `dataset` when it is set."""
    default_env = type(r.env)().name
    if r.reward is None:
        if r.env.name == DATASET_ENV:
            return "env.name dataset is the environment a reward: section builds; add reward: {funcs: [module:function]}"
        return None
    if r.envs:
        return "reward: builds one environment from tasks.sources and does not combine with envs:; drop one of them"
    if r.env.name not in (default_env, DATASET_ENV):
        return (f"reward: builds its own environment from tasks.sources, so env.name {r.env.name!r} has no "
                "effect; drop env.name")
    object.__setattr__(r.env, "name", DATASET_ENV)
    if r.reward.all_tools:  # tools make the episode multi-turn with native tool calls
        if "tool_format" in r.env.model_fields_set and r.env.tool_format == "grammar":
            return ("reward.tools are called natively through the chat template, so env.tool_format: grammar does not "
                    "apply; drop env.tool_format (or set it to native)")
        object.__setattr__(r.env, "tool_format", "native")
    elif r.env.tool_format == "native":
        return ("env.tool_format: native in a reward: recipe needs tools to call; add reward.tools: [module:function] "
                "or drop env.tool_format")
    if not r.tasks.sources:
        return "reward: scores the rows of tasks.sources; add one (a .jsonl or .parquet file, or a saved dataset folder)"
    generated = [s.env for s in r.tasks.sources if s.kind == "generator"]
    if generated:
        return (f"reward: scores rows of task files, but tasks.sources has a generator source ({generated[0]}); "
                "use the environment itself (env.name) or export its tasks to a file")
    for s in r.tasks.sources:  # every other column reaches the reward functions (config/tasks.py)
        if "extra_columns" not in s.model_fields_set:
            object.__setattr__(s, "extra_columns", "metadata")
    if "sft" in r.stages and r.sft.source == "expert":
        return ("a reward: recipe has no scripted expert to imitate; set sft.data to a JSONL of conversations, or drop "
                "the sft stage (stages: [eval, rl, eval])")
    return None
