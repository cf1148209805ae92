"""Reward functions written the TRL way, as named and revisioned reward components (recipe `reward:`).

    def correct(completions, answer, **kwargs):
        return [float(c.strip() == str(a)) for c, a in zip(completions, answer)]

A function takes keyword arguments only: `prompts` and `completions` (lists), every other column
of the task rows as a list (`answer`, `tests` when rows have them, each `metadata` key), and
`**kwargs` for what it does not name; it returns one float, or None, per row. None means "does
not apply to this row": it adds nothing to the reward (TRL's nansum) and the row's
`verifier_output["not_applicable"]` names the function. `async def` functions are awaited. Each
call has a deadline (`reward.timeout_s`): a call that runs past it, raises, or returns something
other than one number-or-None per row is an infrastructure fault for those rows (terminal reason
`infra_failure`, no reward), never a silent 0.

Where this departs from TRL's `GRPOTrainer(reward_funcs=...)`: a call scores the rows of one
episode (lists of length 1), not the whole batch, because each episode ends on its own in the
agent loop; `completion_ids` and `trainer_state` are not passed. A timed-out synchronous
function cannot be stopped from Python; its thread is left to finish in the background.

`resolve_funcs` turns the recipe's `module:function` (or `path/to/file.py:function`) strings into
`RewardFunc`s before any rollout: an unknown module or function, or a signature that cannot take
the arguments, is one sentence (`UserError`). A module is looked up as a file next to the recipe,
then in the current directory, then on the Python path, so a user's `rewards.py` needs no install.
A function's revision is the SHA-256 of its source, so editing it changes what the store records.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import math
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tracerl.errors import UserError

VERIFIER_NAME = "dataset.reward_funcs"
RESERVED = ("prompts", "completions")


@dataclasses.dataclass(frozen=True)
class RewardFunc:
    name: str  # the reward component it fills
    target: str  # `module:function` or `/abs/path.py:function`, as resolved
    fn: Callable[..., Any]
    revision: str  # sha256 of the source, first 12 hex
    is_async: bool
    accepts_kwargs: bool
    params: tuple[str, ...]  # keyword parameters it names (besides **kwargs)
    required: tuple[str, ...]  # those without a default

    def manifest(self) -> dict:
        return {"target": self.target, "revision": self.revision, "async": self.is_async}


class RewardCallError(Exception):
    """A reward function call that did not give one number-or-None per row (timeout, exception, bad value)."""


def _load_module(module: str, search: Sequence[Path], key: str = "reward.funcs"):
    """`module` from a file `<dir>/<module>.py` of `search` (a recipe's folder, the cwd), else the Python path;
    `key` is the recipe key named in the error (reward.funcs, reward.tools)."""
    what = "tool" if key.endswith("tools") else "reward function"
    if module.endswith(".py") or "/" in module or "\\" in module:
        path = Path(module).expanduser()
        candidates = [path] if path.is_absolute() else [d / path for d in search]
        found = next((p.resolve() for p in candidates if p.is_file()), None)
        if found is None:
            raise UserError(f"{what} file {module!r} does not exist (looked in "
                            f"{', '.join(str(d) for d in search)}); give an existing .py path")
        return _import_file(found), str(found)
    for d in search:
        p = d / (module.replace(".", "/") + ".py")
        if p.is_file():
            return _import_file(p.resolve()), str(p.resolve())
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name and module.startswith(err.name):
            raise UserError(f"{what} module {module!r} is neither a file {module}.py next to the recipe or in "
                            f"the current directory nor an installed module; fix the name in {key}") from None
        raise UserError(f"{what} module {module!r} imports {err.name!r}, which is not installed") from None
    return mod, module


def _import_file(path: Path):
    name = f"tracerl_user_rewards_{hashlib.sha256(str(path).encode()).hexdigest()[:10]}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as err:
        del sys.modules[name]
        raise UserError(f"{path} (reward.funcs / reward.tools) failed to import ({type(err).__name__}: {err}); fix it") from None
    return mod


def _source_revision(fn) -> str:
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        text = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def check_signature(name: str, fn: Callable[..., Any]) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    """(accepts **kwargs, keyword parameters, required ones); a signature that cannot take TRL-style
    keyword arguments is a UserError."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise UserError(f"reward function {name!r} has no readable signature; wrap it in a def") from None
    kinds = inspect.Parameter
    accepts_kwargs = any(p.kind == kinds.VAR_KEYWORD for p in sig.parameters.values())
    params, required = [], []
    for p in sig.parameters.values():
        if p.kind in (kinds.POSITIONAL_ONLY,) and p.default is p.empty:
            raise UserError(f"reward function {name!r} has a positional-only parameter {p.name!r}; reward functions "
                            "are called with keyword arguments (prompts=, completions=, one per column, **kwargs)")
        if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY):
            params.append(p.name)
            if p.default is p.empty:
                required.append(p.name)
    if "completions" not in params and not accepts_kwargs:
        raise UserError(f"reward function {name!r} takes neither `completions` nor **kwargs, so it cannot see what the "
                        f"policy wrote; write it as def {name}(completions, **kwargs)")
    return accepts_kwargs, tuple(params), tuple(required)


def resolve_funcs(targets: Sequence[str], search: Sequence[Path] = ()) -> list[RewardFunc]:
    """The recipe's `reward.funcs` as `RewardFunc`s (component name = function name)."""
    search = [Path(d) for d in search] + [Path.cwd()]
    out: list[RewardFunc] = []
    for target in targets:
        module, sep, attr = target.rpartition(":")
        if not sep or not module or not attr:
            raise UserError(f"reward.funcs entry {target!r} must look like module:function or file.py:function")
        mod, where = _load_module(module, search)
        fn = getattr(mod, attr, None)
        if fn is None or not callable(fn):
            known = sorted(k for k, v in vars(mod).items() if inspect.isfunction(v) and not k.startswith("_"))
            raise UserError(f"{where} has no function {attr!r}" + (f"; it defines {', '.join(known)}" if known else ""))
        accepts_kwargs, params, required = check_signature(attr, fn)
        resolved = f"{where}:{attr}" if where.endswith(".py") else target
        out.append(RewardFunc(attr, resolved, fn, _source_revision(fn), inspect.iscoroutinefunction(fn),
                              accepts_kwargs, params, required))
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise UserError(f"reward.funcs names two functions alike ({names}); each function is a reward component "
                        "named after it, so give them different names")
    return out


def check_columns(funcs: Sequence[RewardFunc], columns: Sequence[str], extra: Sequence[str] = ()) -> None:
    """Every parameter a function requires is a column the rows have, or an `extra` argument (`tool_calls`,
    `messages` of a recipe with tools), checked before any rollout."""
    have = set(columns) | set(RESERVED) | set(extra)
    for f in funcs:
        missing = [p for p in f.required if p not in have]
        if missing:
            raise UserError(f"reward function {f.name!r} requires {', '.join(map(repr, missing))}, which the task rows "
                            f"do not have (columns: {', '.join(sorted(have))}); give it a default or map a column to it "
                            "with the source's field_map")


class CallTimeout(Exception):
    """`run_in_thread`'s call ran past its time (distinct from a TimeoutError the function itself raises)."""


class CallFailed(Exception):
    """`run_in_thread`'s call raised `.error` (anything, even SystemExit: it stays in the call's thread)."""

    def __init__(self, error: BaseException):
        super().__init__(error)
        self.error = error


def run_in_thread(fn: Callable, kwargs: dict[str, Any], timeout_s: float, thread_name: str):
    """`fn(**kwargs)` (awaited when it returns an awaitable) in a daemon thread, waited for `timeout_s`: its
    value, CallFailed with what it raised, or CallTimeout. A synchronous call past its time cannot be stopped from Python;
    its thread finishes in the background."""
    box: dict[str, Any] = {}

    def target():
        try:
            value = fn(**kwargs)
            box["value"] = asyncio.run(value) if inspect.isawaitable(value) else value
        except BaseException as err:  # reported to the caller, not lost in the thread
            box["error"] = err

    th = threading.Thread(target=target, name=thread_name, daemon=True)
    th.start()
    th.join(timeout_s)
    if th.is_alive():
        raise CallTimeout(thread_name)
    if "error" in box:
        raise CallFailed(box["error"])
    return box.get("value")


def call_func(f: RewardFunc, kwargs: dict[str, Any], n_rows: int, timeout_s: float) -> list[float | None]:
    """One call of `f` on `n_rows` rows within `timeout_s`; RewardCallError when it does not give a
    finite number or None per row in time."""
    args = kwargs if f.accepts_kwargs else {k: v for k, v in kwargs.items() if k in f.params}
    if f.is_async:
        async def bounded():
            return await asyncio.wait_for(f.fn(**args), timeout_s)

        try:
            values = asyncio.run(bounded())
        except (asyncio.TimeoutError, TimeoutError):
            raise RewardCallError(f"reward function {f.name!r} timed out after {timeout_s:g} s") from None
        except Exception as err:
            raise RewardCallError(f"reward function {f.name!r} raised {type(err).__name__}: {err}") from None
    else:
        try:
            values = run_in_thread(f.fn, args, timeout_s, f"tracerl-reward-{f.name}")
        except CallTimeout:
            raise RewardCallError(f"reward function {f.name!r} timed out after {timeout_s:g} s") from None
        except CallFailed as failed:
            err = failed.error
            raise RewardCallError(f"reward function {f.name!r} raised {type(err).__name__}: {err}") from None
    return _check_values(f.name, values, n_rows)


def _check_values(name: str, values: Any, n_rows: int) -> list[float | None]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) and not hasattr(values, "tolist"):
        raise RewardCallError(f"reward function {name!r} returned {type(values).__name__}, not a list of floats")
    values = values.tolist() if hasattr(values, "tolist") else list(values)
    if len(values) != n_rows:
        raise RewardCallError(f"reward function {name!r} returned {len(values)} values for {n_rows} rows")
    out: list[float | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise RewardCallError(f"reward function {name!r} returned {v!r}; return a finite float or None per row")
        out.append(float(v))
    return out


class RewardFuncsVerifier:
    """The verifier of a `reward:` recipe: every function is one component named after it.

    `verify(task, completion)` returns the components of the functions that applied; `raw` names
    those that did not (`not_applicable`) or failed (`infra`)."""

    name = VERIFIER_NAME

    def __init__(self, funcs: Sequence[RewardFunc], *, timeout_s: float, prompt_of: Callable[[Any], Any]):
        self.funcs = list(funcs)
        self.timeout_s = timeout_s
        self.prompt_of = prompt_of  # task -> what `prompts` holds for it (text, or the messages)
        self.components = tuple(f.name for f in self.funcs)
        self.primary = self.components[0]
        self.revision = "rf-" + hashlib.sha256(
            ";".join(f"{f.name}={f.target}@{f.revision}" for f in self.funcs).encode()).hexdigest()[:12]

    def arguments(self, tasks: Sequence[Any], completions: Sequence[Any]) -> dict[str, list]:
        """The TRL-style keyword arguments for these rows: prompts, completions, then every column. A completion
        that is already a list of messages (a multi-turn episode with tools) is passed as it is."""
        prompts = [self.prompt_of(t) for t in tasks]
        comps: list[Any] = [[{"role": "assistant", "content": c}] if isinstance(p, list) and isinstance(c, str) else c
                            for p, c in zip(prompts, completions)]  # conversational prompts: TRL's message lists
        columns = row_columns(tasks)
        return {"prompts": prompts, "completions": comps, **columns}

    def score(self, task: Any, completion: Any, extra: dict[str, Any] | None = None
              ) -> tuple[dict[str, float], dict[str, Any]]:
        """Components of one row; raises RewardCallError when a call failed (the episode is an infra failure).
        `completion`: the text, or the episode's assistant/tool messages; `extra`: more arguments of this row
        (`tool_calls`, `messages`), each passed as a list of one."""
        kwargs = {**self.arguments([task], [completion]), **{k: [v] for k, v in (extra or {}).items()}}
        comps, not_applicable = {}, []
        for f in self.funcs:
            (value,) = call_func(f, kwargs, 1, self.timeout_s)
            if value is None:
                not_applicable.append(f.name)
            else:
                comps[f.name] = value
        raw = {"not_applicable": ",".join(not_applicable)} if not_applicable else {}
        return comps, raw

    def manifest(self) -> dict:
        return {f.name: f.manifest() for f in self.funcs}


def row_columns(tasks: Sequence[Any]) -> dict[str, list]:
    """Each row's columns besides the prompt, as lists: `answer`, `tests` (when any row has them), each metadata key."""
    out: dict[str, list] = {"answer": [getattr(t, "answer", None) for t in tasks]}
    if any(getattr(t, "tests", None) is not None for t in tasks):
        out["tests"] = [getattr(t, "tests", None) for t in tasks]
    keys = list(dict.fromkeys(k for t in tasks for k in (getattr(t, "metadata", None) or {})))
    for k in keys:
        if k not in RESERVED and k not in out:
            out[k] = [(getattr(t, "metadata", None) or {}).get(k) for t in tasks]
    return out
