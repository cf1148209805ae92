"""`dataset`: one-turn episodes over rows of task files, scored by a recipe's own reward functions.

A recipe with a `reward:` section (config/reward.py) trains on this environment: `reset` renders the
row's prompt (a string becomes the user message, after `reward.system_prompt` when set; a list of
messages is used as it is), the policy writes one completion, and `step` scores it with every
function of `reward.funcs` through the registered verifier `dataset.reward_funcs`
(verifiers/reward_funcs.py), so each function is a named component with the function's source hash
in the verifier revision. A function that returned None for the row adds nothing and is named in
`verifier_output["not_applicable"]`; a call that timed out, raised or returned garbage ends the
episode as `infra_failure` with the reason in `verifier_output["infra"]`.

`install(recipe)` resolves the functions, checks their signatures against the rows' columns and
registers the environment and its verifier for this process; `run_recipe` calls it first, so an
unknown module or a wrong signature fails before any run directory or rollout. There is no scripted
expert: SFT reads a conversations file (`sft.data`) or is left out.

With `reward.tools` / `reward.code_tools` the environment's native tool mode (`env.tool_format: native`,
set by the `reward:` section) plays multi-turn episodes with those tools (tools.py); `register` declares
it with `register_native`, so the run-start conformance check, the SFT loader and the workers find it
as they find math_tool's.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path

from tracerl.config.reward import DATASET_ENV
from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs.base import EnvSpec, Message, Step, register_env
from tracerl.envs.dataset.tools import (EXTRA_ARGS, DatasetToolEnv, check_stop_strings, native_tools, resolve_tools,
                                        tools_revision)
from tracerl.envs.native_tools import NATIVE_ENVS, register_native
from tracerl.errors import UserError
from tracerl.verifiers.reward_funcs import (VERIFIER_NAME, RewardCallError, RewardFuncsVerifier, check_columns,
                                            resolve_funcs, row_columns)
from tracerl.verifiers.registry import register_verifier

REVISION = "dataset-env-1"


class DatasetEnv:
    """One row, one completion, the reward functions' scores."""

    name = DATASET_ENV
    revision = REVISION

    def __init__(self, verifier: RewardFuncsVerifier, system_prompt: str | None = None):
        self.verifier, self.system_prompt = verifier, system_prompt
        self.task: Task | None = None
        self.reply: str | None = None

    def reset(self, task: Task, seed: int) -> list[Message]:
        self.task, self.reply = task, None
        return first_messages(task, self.system_prompt)

    def step(self, action_text: str) -> Step:
        self.reply = action_text
        ident = {"verifier": self.verifier.name, "verifier_revision": self.verifier.revision}
        try:
            comps, raw = self.verifier.score(self.task, action_text)
        except RewardCallError as err:  # an infrastructure fault of these rows, never a reward of 0
            return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE, info={"infra": str(err), **ident})
        return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components=comps, info={**raw, **ident})

    def state_hash(self) -> str:
        key = (self.task.id if self.task else None, self.reply)
        return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def first_messages(task: Task, system_prompt: str | None) -> list[Message]:
    """A row's prompt as messages: a list as it is; a string as the user message, after the system prompt."""
    if isinstance(task.prompt, list):
        return [dict(m) for m in task.prompt]
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, {"role": "user", "content": str(task.prompt)}]


def _no_expert(task, observations, rng, **kwargs) -> str:
    raise UserError("a reward: recipe has no scripted expert; set sft.data to a JSONL of conversations or drop the sft stage")


def _loaded_tasks(recipe) -> list[Task]:
    from tracerl.tasks.sources import load_source

    return [t for cfg in recipe.tasks.sources for t in load_source(cfg).tasks]


def install(recipe, search: Sequence[str | Path] = ()) -> RewardFuncsVerifier | None:
    """Resolve `recipe.reward`'s functions (files next to the recipe: `search`, then the cwd), check them
    against the rows' columns, and register the `dataset` environment and its verifier. The resolved
    targets (a file's absolute path) replace `reward.funcs`, so the run's config.yaml names what ran.
    Returns the verifier, or None for a recipe without `reward:`."""
    cfg = recipe.reward
    if cfg is None:
        return None
    funcs = resolve_funcs(cfg.funcs, search)
    tools = resolve_tools(cfg.tools, cfg.code_tools, search)
    tasks = _loaded_tasks(recipe)
    check_columns(funcs, list(row_columns(tasks)) if tasks else ["answer"], EXTRA_ARGS if tools else ())
    if tools:
        check_stop_strings(cfg.stop_strings, native_tools(tools, recipe.env.tool_parser, cfg.timeout_s))
    heldout = [t for t in tasks if t.split == "heldout"]
    if not heldout and ("eval" in recipe.stages or recipe.rl.eval_every):
        raise UserError("the reward: recipe evaluates on held-out rows, but no row of tasks.sources has split: heldout; "
                        "mark some rows `\"split\": \"heldout\"` or add a source with split: heldout")
    verifier = register(cfg, funcs, tasks, tools)
    resolved = {"funcs": [f.target for f in funcs], "tools": [t.target for t in tools if not t.code],
                "code_tools": [t.target for t in tools if t.code]}
    if any(v != list(getattr(cfg, k)) for k, v in resolved.items()):
        recipe.reward = cfg.model_copy(update=resolved)
    return verifier


def register(cfg, funcs, tasks: Sequence[Task] = (), tools=()) -> RewardFuncsVerifier:
    """Register the `dataset` environment and its verifier over resolved `funcs` in this process, and its
    native tool mode over resolved `tools` (none: the environment has no native mode)."""
    verifier = RewardFuncsVerifier(funcs, timeout_s=cfg.timeout_s, prompt_of=lambda t: t.prompt)
    register_verifier(VERIFIER_NAME, lambda: verifier, replace=True)
    system = cfg.system_prompt

    def generate(split: str, n: int, seed: int = 0, difficulty=None) -> list[Task]:
        return [t for t in tasks if t.split == split][:n]  # only reached when a pool lacks that split

    register_env(EnvSpec(
        name=DATASET_ENV, revision=REVISION, make=lambda: DatasetEnv(verifier, system), generate=generate,
        expert=_no_expert, reward_weights=dict(zip(verifier.components, cfg.weight_list())), stop_strings=tuple(cfg.stop_strings),
        verifier=VERIFIER_NAME, description="One completion per row, scored by the recipe's reward functions."))
    if not tools:
        NATIVE_ENVS.pop(DATASET_ENV, None)
        return verifier

    def tool_spec(spec: EnvSpec, parser: str) -> EnvSpec:
        """The multi-turn spec: the tools through the chat template, read by `parser`."""
        native = native_tools(tools, parser, cfg.timeout_s)
        revision = f"{REVISION}+tools-{tools_revision(tools, parser)}"
        make = lambda: DatasetToolEnv(verifier, native_tools(tools, parser, cfg.timeout_s), name=DATASET_ENV,
                                      revision=revision, first_messages=lambda t: first_messages(t, system))
        stops = tuple(dict.fromkeys([*native.parser.stop_strings, *cfg.stop_strings]))
        return dataclasses.replace(spec, revision=revision, make=make, stop_strings=stops,
                                   special_tokens=native.tiny_tokenizer_tags(),
                                   description=f"Rows with tools ({', '.join(native.tools.names)}; {parser} calls), "
                                               "scored by the recipe's reward functions.")

    register_native(DATASET_ENV, tool_spec)
    return verifier


def install_in_worker(reward: dict) -> RewardFuncsVerifier:
    """What a rollout worker (a spawned process of rl.mode: async, a Ray actor) does before it plays: import
    the functions the driver resolved (`reward` is the driver's `recipe.reward` after `install`, whose
    files are absolute paths) and register the environment. The rows arrive in the jobs, so none are read;
    the revisions are the source hashes the driver recorded, so trajectories name the same verifier."""
    from tracerl.config.reward import RewardConfig

    cfg = RewardConfig(**reward)
    return register(cfg, resolve_funcs(cfg.funcs), tools=resolve_tools(cfg.tools, cfg.code_tools))


__all__ = ["DatasetEnv", "install", "install_in_worker", "register", "REVISION"]
