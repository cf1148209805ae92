"""Typed recipe configuration (docs/architecture.md, "Configuration and runs").

A recipe is a YAML file validated by these pydantic models (`extra="forbid"`; a description on
every field). `load_recipe(name_or_path, overrides)` applies `key.sub=value` overrides and fails
before anything runs, with one sentence naming the bad key and the closest valid one.
Derived sizes (episodes per step = prompts × group size) are computed here, in one place.
"""

from __future__ import annotations

import difflib
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from tracerl.algorithms.spec import ALGORITHMS
from tracerl.backend_config import RayConfig, check_backend
from tracerl.errors import UserError
from tracerl.rl_config import RLConfig, RLStageConfig, _Cfg
from tracerl.placement_config import PlacementFields, placement_problem
from tracerl.roles_config import RolesConfig
from tracerl.envs_config import EnvEntry, MixtureConfig, check_envs
from tracerl.serve.config import GatewayConfig
from tracerl.rollout.engine_config import EngineConfig, check_engine
from tracerl.faults import FaultsConfig
from tracerl.learner_config import LearnerConfig, check_learner
from tracerl.sandbox.runtime import SandboxConfig
from tracerl.sft_config import RejectionConfig, SFTConfig, check_sft_source  # noqa: F401  (re-exported)
from tracerl.tasks.config import TasksConfig
from tracerl.telemetry.gates import GatesConfig
from tracerl.telemetry.loggers import LoggersConfig


class RunConfig(_Cfg):
    name: str = Field("default", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
    """Run name; the run directory is `<root>/<name>-<timestamp>` (letters, digits, . _ + -; at most 100)."""
    root: str = Field("runs", min_length=1, max_length=1024, pattern=r"^[^\x00]+$")
    """Folder under which run directories are created."""
    dir: str | None = Field(None, min_length=1, max_length=1024, pattern=r"^[^\x00]+$")
    """Exact run directory to use instead of `<root>/<name>-<timestamp>`."""
    seed: int = Field(0, ge=0, lt=2**63)
    """Seed for model init, task generation, sampling and data order."""
    threads: int = Field(2, ge=1, le=1024)
    """torch intra-op threads (the default machine has 2 cores)."""
    progress: bool = True
    """Show progress bars for long stages."""
    backend: Literal["local", "ray"] = "local"
    """Where rollouts run: local (this process, or spawned processes in rl.mode async) or ray (Ray actors
    placed by the `ray:` section, the learner in this process; docs/ray.md)."""


class TinyModelConfig(_Cfg):
    hidden_size: int = Field(128, ge=1, le=1 << 16)
    """Width of the built-in tiny Llama-architecture model."""
    num_layers: int = Field(4, ge=1, le=256)
    """Transformer blocks."""
    num_heads: int = Field(4, ge=1, le=1024)
    """Attention heads."""
    intermediate_size: int = Field(384, ge=1, le=1 << 18)
    """MLP width."""
    vocab_size: int = Field(512, ge=64, le=1 << 20)
    """Target BPE vocabulary size of the locally trained tokenizer."""
    max_positions: int = Field(512, ge=8, le=1 << 20)
    """Maximum sequence length."""
    individual_digits: bool = False
    """One token per digit (as the Llama, Qwen and DeepSeek tokenizers split numbers), so copying a
    number is copying digits the model sees everywhere; false: BPE merges digit runs into tokens
    ("81"), each a rare token only the numbers that use it teach."""

    @model_validator(mode="after")
    def _heads_divide_width(self) -> TinyModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"model.tiny.hidden_size ({self.hidden_size}) must be a multiple of "
                             f"model.tiny.num_heads ({self.num_heads})")
        return self


class ModelConfig(PlacementFields):
    path: str | None = None
    """Local directory of a Hugging Face causal LM and tokenizer; null builds the tiny model."""
    gguf_file: str | None = None
    """GGUF file name inside `path`, loaded through transformers' gguf support."""
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
    """Shape of the built-in tiny model (used when `path` is null)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Parameter dtype for training and sampling."""


class EnvConfig(_Cfg):
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
    step_timeout_s: float | None = Field(None, gt=0)
    """Wall seconds one environment step (a tool call) may take; a slower one ends its episode as an
    infra_failure (the other episodes go on). Null: no limit beyond the sandbox's own."""
    watchdog_s: float | None = Field(None, gt=0, le=86400)
    """A rollout phase (the engine's generate, a turn's env steps) running longer is reported by name; null: off."""
    infra_retries: int = Field(0, ge=0, le=10)
    """An infra_failure episode is played again (fresh reset seed) up to this many times; the final one
    records its attempt number and the ids and reasons of the attempts it replaced (retry_lineage)."""

    @model_validator(mode="after")
    def _difficulty_ranges(self) -> EnvConfig:
        for name in ("train_difficulty", "heldout_difficulty"):
            low, high = getattr(self, name)
            if not 0.0 <= low <= high <= 1.0:
                raise ValueError(f"env.{name} must be [low, high] with 0 <= low <= high <= 1, got [{low}, {high}]")
        return self


class SamplingConfig(_Cfg):
    temperature: float = Field(1.0, gt=0.0, le=100.0, allow_inf_nan=False)
    """Softmax temperature; behavior log-probs are under this tempered distribution."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    top_k: int = Field(0, ge=0)
    """Top-k sampling (0 disables)."""


class EvalConfig(_Cfg):
    tasks: int = Field(200, ge=1, le=10**7)
    """Held-out tasks evaluated (taken in order from the held-out split)."""
    samples: int = Field(4, ge=1, le=10**4)
    """Samples per task (avg@n and pass@k use them)."""
    temperature: float = Field(1.0, gt=0.0, le=100.0, allow_inf_nan=False)
    """Sampling temperature of the frozen protocol."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus mass of the frozen protocol."""
    k: list[int] = Field(default_factory=lambda: [1, 4], min_length=1, max_length=64)
    """pass@k values reported (each between 1 and `samples`)."""
    slices: list[Literal["tool_error", "tool_wrong", "faults"]] = Field(default_factory=list, max_length=3)
    """Fault slices evaluated beside the clean held-out run (same tasks and seed): every tool
    observation an error, every tool number off by one, or the recipe's `faults:` (eval/slices.py)."""

    @model_validator(mode="after")
    def _k_within_samples(self) -> EvalConfig:
        bad = [k for k in self.k if not 1 <= k <= self.samples]
        if bad:
            raise ValueError(f"eval.k values must be between 1 and eval.samples ({self.samples}), got {bad}")
        return self


class Recipe(_Cfg):
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
    (`tracerl.envs_config`); empty means the single `env:` environment."""
    mixture: MixtureConfig = Field(default_factory=MixtureConfig)
    """Per-environment reward normalisation and the per-domain regression gate (with `envs:` only)."""
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    """An external OpenAI-client agent trained through the in-process gateway (docs/gateway.md); off by default."""
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    """Learner processes of the RL stage (`ranks`: FSDP2-sharded policy over N gloo ranks; 1: in-process)."""
    ray: RayConfig = Field(default_factory=RayConfig)
    """Ray runtime and the rollout actors' resources (with run.backend: ray; docs/ray.md)."""

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
        if self.rl.mode == "async" and self.tasks.sampler.kind == "dynamic":
            raise ValueError("rl.mode: async forms fixed-size batches; it does not combine with tasks.sampler.kind: dynamic")
        if self.gateway.agent and self.envs:
            raise ValueError("gateway.agent plays one environment (env.name); remove envs: or gateway.agent")
        if self.rl.mode == "async" and self.gateway.agent:
            raise ValueError("gateway.agent samples from the trainer's own engine while its episode runs, which an "
                             "async learner would update under it; use rl.mode: sync with gateway.agent")
        problem = (check_envs(self) or check_learner(self) or check_backend(self) or placement_problem(self)
                   or check_engine(self))
        if problem:
            raise ValueError(problem)
        if "rl" in self.stages and self.sampling.temperature <= 0:
            raise ValueError(f"RL samples from the policy, so sampling.temperature must be > 0 (got {self.sampling.temperature}); "
                             "greedy decoding belongs to evaluation")
        return self

    @property
    def episodes_per_step(self) -> int:
        return self.rl.prompts_per_step * self.rl.group_size


# -- loading ----------------------------------------------------------------------------------

def recipe_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("tracerl.recipes").iterdir() if p.name.endswith(".yaml"))


MAX_RECIPE_BYTES = 1 << 20
MAX_YAML_NODES = 100_000  # after aliases are expanded: a few lines of anchors can mean billions


def _decode(raw: bytes, what: str) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(raw) > 1 and raw.count(b"\x00") > len(raw) // 4):
        raise UserError(f"{what} is UTF-16 text, not UTF-8; save it as UTF-8 and run again")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserError(f"{what} is not UTF-8 text (a binary file?); give a YAML recipe saved as UTF-8") from None
    if "\x00" in text:
        raise UserError(f"{what} holds NUL bytes (a binary file?); give a YAML recipe saved as UTF-8")
    return text


def _expanded_size(node, sizes: dict[int, int], depth: int = 0) -> int:
    """Nodes in `node` once every alias is expanded (shared nodes counted once per use)."""
    if id(node) in sizes:
        return sizes[id(node)]
    if depth > 100:
        raise UserError("the YAML is nested more than 100 levels deep; flatten it")
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(n, sizes, depth + 1) for n in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, sizes, depth + 1) + _expanded_size(v, sizes, depth + 1) for k, v in node.value)
    sizes[id(node)] = size
    return size


def safe_yaml(text: str, what: str):
    """`yaml.safe_load`, refusing what would blow up later: invalid syntax, nesting deeper than
    100 levels, or aliases that expand past MAX_YAML_NODES nodes (an "alias bomb")."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_YAML_NODES:
            raise UserError(f"{what} expands to {size} YAML nodes through aliases (more than {MAX_YAML_NODES}); "
                            "write the values out instead of nesting anchors")
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise UserError(f"{what} is not valid YAML{where} ({problem}); fix the syntax and run again") from None
    except RecursionError:
        raise UserError(f"{what} is nested too deeply to read; flatten it") from None


def _read_yaml(name_or_path: str) -> tuple[dict[str, Any], str]:
    path = Path(name_or_path)
    if "\x00" in name_or_path:
        raise UserError("the recipe name holds a NUL character; give a shipped recipe name or a YAML path")
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        res = resources.files("tracerl.recipes") / f"{name_or_path}.yaml"
        if "/" in name_or_path or not res.is_file():
            close = difflib.get_close_matches(name_or_path, recipe_names(), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"shipped recipes: {', '.join(recipe_names())}"
            raise UserError(f"no recipe named {name_or_path[:200]!r}; {hint}")
        raw, source = res.read_bytes(), f"recipes/{name_or_path}.yaml"
    else:
        if not path.is_file():
            raise UserError(f"recipe file {path} does not exist; give a shipped recipe name or an existing YAML path")
        try:
            if path.stat().st_size > MAX_RECIPE_BYTES:
                raise UserError(f"recipe {path} is {path.stat().st_size} bytes, more than a recipe needs "
                                f"({MAX_RECIPE_BYTES}); give the YAML recipe, not a data file")
            raw = path.read_bytes()
        except OSError as err:
            raise UserError(f"recipe file {path} cannot be read ({err.strerror}); check its permissions") from None
        source = str(path)
    data = safe_yaml(_decode(raw, f"recipe {source}"), f"recipe {source}")
    if data is None:
        raise UserError(f"recipe {source} is empty; write at least one section (run:, model:, ...) "
                        "or run a shipped recipe by name")
    if not isinstance(data, dict):
        raise UserError(f"recipe {source} must be a YAML mapping of sections (run:, model:, ...), not a {type(data).__name__}")
    return data, source


def _models_in(ann: Any) -> list[type[BaseModel]]:
    """The pydantic models a field annotation can hold (a model, an optional one, a union of them)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for arg in typing.get_args(ann) for m in _models_in(arg)]


def _valid_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        full = f"{prefix}{name}"
        keys.append(full)
        for sub in _models_in(field.annotation):
            keys += [k for k in _valid_keys(sub, full + ".") if k not in keys]
    return keys


# keys of earlier releases, and where their setting lives now
_MOVED = {"rl.advantage": "rl.algorithm.name", "rl.advantage_scale": "rl.algorithm.scale",
          "rl.clip_low": "rl.algorithm.clip_low", "rl.clip_high": "rl.algorithm.clip_high",
          "rl.aggregation": "rl.algorithm.aggregation", "rl.kl_coef": "rl.algorithm.kl.coef"}
# union tags that pydantic puts into an error location (`rl.algorithm.dapo.clip_hgh`)
_TAGS = set(ALGORITHMS) | {"tis", "mis"}


def _unknown_key(key: str, where: str, algorithm: str | None = None) -> str:
    if key in _MOVED:
        return f"{key!r}{where} has moved: set {_MOVED[key]!r} instead"
    if algorithm is not None and key in _valid_keys(Recipe):  # a parameter of another algorithm
        return (f"{key!r}{where} is not a parameter of algorithm {algorithm!r}; "
                f"`tracerl algorithms` lists each algorithm's parameters")
    close = difflib.get_close_matches(key, _valid_keys(Recipe), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {key!r}{where}{hint}"


def field_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The pydantic model an annotation holds, and whether it is the item type of a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (list, tuple):
        inner = field_model(args[0])[0] if args else None
        return inner, True
    for a in args:  # Optional[...] / unions
        found = field_model(a)
        if found[0] is not None or found[1]:
            return found
    return None, False


def _check_key(key: str) -> None:
    """A dotted override key names a field; a number after a list field indexes it (`rl.stages.0.steps`)."""
    parts = key.split(".")
    plain = ".".join(p for p in parts if not p.isdigit())
    model: type[BaseModel] | None = Recipe
    in_list, done = False, []
    for part in parts:
        if in_list:
            if not part.isdigit():
                raise UserError(f"override key {key!r}: {'.'.join(done)!r} is a list; index it with a number, "
                                f"e.g. {'.'.join(done)}.0")
            in_list = False
        elif part.isdigit():
            raise UserError(f"override key {key!r}: {'.'.join(done)!r} is not a list, so {part} cannot index it")
        elif model is None:
            raise UserError(f"override key {key!r}: {'.'.join(done)!r} is a value, not a section")
        elif part not in model.model_fields:
            raise UserError(_unknown_key(plain[:200], "").replace("unknown key", "unknown override key"))
        else:
            annotation = model.model_fields[part].annotation
            if len(_models_in(annotation)) > 1:  # a union (rl.algorithm): the keys of all its members count
                if plain not in _valid_keys(Recipe):
                    raise UserError(_unknown_key(plain[:200], "").replace("unknown key", "unknown override key"))
                return
            model, in_list = field_model(annotation)
        done.append(part)


def _apply_override(data: dict[str, Any], item: str) -> str:
    """Apply `key.sub=value` (list items by index: `rl.stages.0.steps=3`) to the raw recipe.

    Returns the path the override answers for: its key, or the list item it created."""
    if "=" not in item:
        raise UserError(f"override {item[:200]!r} must look like key.sub=value")
    key, raw = item.split("=", 1)
    _check_key(key)
    if len(raw) > 10_000:
        raise UserError(f"override {key!r} has a value of {len(raw)} characters; put long values in a recipe file")
    value = safe_yaml(raw, f"the value of override {key!r}") if raw != "" else None
    node: Any = data
    parts, blame = key.split("."), key
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            idx = int(part)
            where = ".".join(parts[:i])
            if idx > len(node):
                raise UserError(f"override {item!r}: {where} has {len(node)} items, so index {idx} is out of range "
                                f"(use 0..{len(node)}; {len(node)} appends one)")
            if idx == len(node):
                node.append({} if not last else None)
                blame = ".".join(parts[:i + 1])  # the new item is the override's doing, all of its fields
            if last:
                node[idx] = value
            else:
                if node[idx] is None:
                    node[idx] = {}
                node = node[idx]
            continue
        if not isinstance(node, dict):
            raise UserError(f"override {item!r} goes inside {parts[i - 1]!r}, which is not a section in the recipe")
        if last:
            node[part] = value
        else:
            if node.get(part) is None:
                node[part] = [] if parts[i + 1].isdigit() else {}
            node = node[part]
    return blame


def _explain(err: ValidationError, source: str, overrides: dict[str, str] | None = None) -> str:
    """One sentence for the first validation error, blaming the override that set the value if one did."""
    e = err.errors()[0]
    loc = ".".join(str(x) for x in e["loc"] if x not in _TAGS)
    blamed = [k for k in (overrides or {}) if loc == k or loc.startswith(k + ".") or k.startswith(loc + ".")]
    if blamed:
        item = overrides[max(blamed, key=len)]
        source = f"override {item if len(item) <= 80 else item[:79] + '…'!r}"
    elif not loc and overrides:  # a check across fields: name the overrides that took part
        joined = " ".join(overrides.values())
        source = f"{source} with overrides {joined if len(joined) <= 120 else joined[:119] + '…'}"
    if e["type"] == "extra_forbidden":
        tags = [x for x in e["loc"] if x in ALGORITHMS]
        return _unknown_key(loc, f" in {source}", tags[0] if tags else None)
    if e["type"] == "union_tag_invalid":
        tag = e.get("ctx", {}).get("tag")
        known = [k.strip(" '") for k in str(e.get("ctx", {}).get("expected_tags", "")).split(",")]
        close = difflib.get_close_matches(str(tag), list(known), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
        return f"unknown {loc.rsplit('.', 1)[-1]} {tag!r} for {loc!r} in {source}; {hint}"
    if not loc or (e["type"] == "value_error" and isinstance(e.get("input"), dict)):  # a check across fields
        return f"{source}: {e['msg'].removeprefix('Value error, ')}"
    got = repr(e.get("input"))
    got = got if len(got) <= 200 else got[:200] + f"... ({len(got)} characters)"
    return f"bad value for {loc!r} in {source}: {e['msg']} (got {got})"


def load_recipe(name_or_path: str = "default", overrides: list[str] | None = None) -> Recipe:
    data, source = _read_yaml(name_or_path)
    applied = {}
    for item in overrides or []:
        applied[_apply_override(data, item)] = item
    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        raise UserError(_explain(err, source, applied)) from None
