"""`env.name: verifiers:<module>`: a verifiers 0.4 environment's tasks and rewards as a tracerl environment.

    # my_env.py                                   # recipe: env: {name: "verifiers:my_env"}
    import verifiers.v1 as vf
    class Data(vf.TaskData): answer: str
    class MyTask(vf.Task[Data]):
        @vf.reward
        async def correct(self, task, trace) -> float: return float(trace.last_reply == task.answer)
    class MyTaskset(vf.Taskset[MyTask]):
        def load(self): yield MyTask(Data(prompt="2+2?", answer="4"))
    def load_environment(): return MyTaskset(vf.TasksetConfig())

`<module>` is an importable module or a `.py` file (absolute, or relative to the current directory);
its `load_environment()` returns a `vf.Taskset`, or a `vf.Env` (its `taskset` is used). Its tasks
are the run's tasks: one in five (by the SHA-256 of the task's key) is held out, the rest train. The
policy answers each task's prompt (after its `system_prompt`) through tracerl's agent loop, so every
sampled token keeps its id, log-prob and policy version. The reply becomes a verifiers `Trace` (the
prompt messages, then the reply as a sampled assistant message) and `Task.score(trace)` runs the
task's `@vf.reward` functions (and config-plugged ones): each is a named reward component with its
`@vf.reward(weight=...)` weight; a reward returning a mapping adds one component per key (weight of
the function). A scoring error is an `infra_failure`, never a reward of 0.

Where this departs from running verifiers itself: verifiers 0.4 runs an agent as a harness program
(a PEP 723 script that `uv` installs, in a runtime, behind its own interception proxy), which needs
`uv` and network at run time; here the agent is tracerl's (single-turn, or a multi-turn env's run). Rewards that need the
task's runtime (a `runtime` parameter without a default) cannot run and are refused before any
rollout. A `load_environment()` that returns a multi-turn `vf.Env` (one whose `run` drives a conversation
with `Interaction.turn`) is played turn by turn (verifiers_chat.py); tool servers (MCP `Toolset`s) and
envs with several agents (user simulators with their own model) are not supported yet.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from typing import Any

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs.adapters._common import import_verifiers, load_user_module, task_messages
from tracerl.envs.base import EnvSpec, Message, Step, register_env
from tracerl.errors import UserError
from tracerl.verifiers.registry import register_verifier

HELDOUT_EVERY = 5


def load_taskset(target: str):
    """The `vf.Taskset` of `target`'s `load_environment()`."""
    return load_env(target)[1]


def load_env(target: str):
    """(the multi-turn `vf.Env` or None, its `vf.Taskset`) of `target`'s `load_environment()`: an env other
    than `SingleAgentEnv` drives its own conversation (verifiers_chat.py); a plain taskset is single-turn."""
    vf = import_verifiers()
    mod, where = load_user_module(target)
    make = getattr(mod, "load_environment", None)
    if not callable(make):
        raise UserError(f"{where} has no load_environment(); a verifiers environment module defines one")
    env = make()
    taskset = getattr(env, "taskset", env)
    if not isinstance(taskset, vf.Taskset):
        raise UserError(f"{where}: load_environment() returned {type(env).__name__}; return a verifiers Taskset or Env")
    from verifiers.v1.envs.single_agent import SingleAgentEnv

    multi = isinstance(env, vf.Env) and not isinstance(env, SingleAgentEnv)
    return (env if multi else None), taskset


def _reward_fns(vf_task) -> list:
    fns = vf_task.hooks("reward")
    if not fns:
        raise UserError(f"the verifiers task {type(vf_task).__name__} has no @vf.reward function; add one")
    for fn in fns:
        param = inspect.signature(fn).parameters.get("runtime")
        if param is not None and param.default is inspect.Parameter.empty:
            raise UserError(f"the verifiers reward {fn.__name__!r} needs the task's runtime, which tracerl does not "
                            "provide; give `runtime` a default of None or score from the trace")
    return fns


class VerifiersScorer:
    """`Task.score` on a Trace of the prompt and one reply; components are the trace's rewards."""

    def __init__(self, name: str, vf_tasks: dict[str, Any]):
        self.name, self.vf_tasks = name, vf_tasks
        first = next(iter(vf_tasks.values()))
        srcs = []
        for fn in _reward_fns(first):
            try:
                srcs.append(inspect.getsource(fn))
            except (OSError, TypeError):
                srcs.append(fn.__qualname__)
        self.weights = {fn.__name__: float(getattr(fn, "_vf_weight", 1.0)) for fn in _reward_fns(first)}
        self.revision = "vf-" + hashlib.sha256("\n".join(srcs).encode()).hexdigest()[:12]
        self.components = tuple(self.weights)
        self.primary = self.components[0]

    def verify(self, task: Task, trajectory: Any):
        """The `Verifier` protocol (audits, re-scoring): the reply is the trajectory's text."""
        from tracerl.verifiers.base import VerifierResult, text_of

        return VerifierResult(self.score(task, text_of(trajectory)), {"reason": "verifiers"})

    def score_trace(self, vf_task, trace) -> dict[str, float]:
        """`vf_task.score(trace)`: the trace's rewards as components."""
        asyncio.run(vf_task.score(trace))
        return {k: float(r.score) for k, r in trace.rewards.items() if r is not None}

    def score(self, task: Task, reply: str) -> dict[str, float]:
        vf = import_verifiers()
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask

        t = self.vf_tasks[task.id]
        trace = Trace(task=TraceTask(type=type(t).__name__, data=t.data, key=t.key, hash=t.hash),
                      agent=AgentInfo(config=vf.AgentConfig()))
        for m in task_messages(t.data):
            cls = vf.SystemMessage if m["role"] == "system" else vf.AssistantMessage if m["role"] == "assistant" else vf.UserMessage
            trace.nodes.append(MessageNode(parent=len(trace.nodes) - 1 if trace.nodes else None, message=cls(content=m["content"])))
        trace.nodes.append(MessageNode(parent=len(trace.nodes) - 1, message=vf.AssistantMessage(content=reply), sampled=True))
        return self.score_trace(t, trace)


class VerifiersEnv:
    """One verifiers task, one reply, the task's rewards."""

    revision = "verifiers-env-1"

    def __init__(self, name: str, scorer: VerifiersScorer):
        self.name, self.scorer = name, scorer
        self.task: Task | None = None
        self.reply: str | None = None

    def reset(self, task: Task, seed: int) -> list[Message]:
        self.task, self.reply = task, None
        return [dict(m) for m in task.prompt]

    def step(self, action_text: str) -> Step:
        self.reply = action_text
        ident = {"verifier": self.name, "verifier_revision": self.scorer.revision}
        try:
            comps = self.scorer.score(self.task, action_text)
        except Exception as err:  # verifiers wraps a reward's exception in TaskError: an infra fault, not a 0
            return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE,
                        info={"infra": f"{type(err).__name__}: {err}", **ident})
        return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components=comps, info=ident)

    def state_hash(self) -> str:
        return hashlib.sha256(repr((self.task.id if self.task else None, self.reply)).encode()).hexdigest()[:16]


def _reference_expert(task, observations, rng, **kwargs) -> str:
    """The task data's `answer` field as the reply (what SFT imitates and the tiny model's vocabulary is built from)."""
    if task.answer is None:
        raise UserError("this verifiers environment's tasks have no `answer` field, so there is no scripted expert; set "
                        "sft.data to a JSONL of conversations, or drop the sft stage and set model.path")
    return str(task.answer)


def install(name: str) -> EnvSpec:
    """Load `name` (`verifiers:<module>`), convert its tasks, and register its `EnvSpec` under `name`."""
    target = name.partition(":")[2]
    if not target:
        raise UserError("env.name verifiers: needs a module, e.g. verifiers:my_env or verifiers:path/to/env.py")
    env, taskset = load_env(target)
    vf_tasks, tasks = {}, []
    for vt in taskset:
        tid = f"{name}:{vt.key}"
        if tid in vf_tasks:
            raise UserError(f"{name}: two tasks share the key {vt.key!r}; task keys must be unique")
        split = "heldout" if int(hashlib.sha256(vt.key.encode()).hexdigest(), 16) % HELDOUT_EVERY == 0 else "train"
        vf_tasks[tid] = vt
        tasks.append(Task(id=tid, source=name, prompt=task_messages(vt.data), split=split, license="unknown",
                          answer=getattr(vt.data, "answer", None)))
    if not tasks:
        raise UserError(f"{name}: load_environment() yielded no tasks")
    scorer = VerifiersScorer(name, vf_tasks)
    register_verifier(name, lambda: scorer, replace=True)

    def generate(split: str, n: int, seed: int = 0, difficulty=None) -> list[Task]:
        return [t for t in tasks if t.split == split][:n]

    make, kind, revision = (lambda: VerifiersEnv(name, scorer)), "single-turn", scorer.revision
    if env is not None:  # a multi-turn env: its run() drives the conversation (verifiers_chat.py)
        from tracerl.envs.adapters.verifiers_chat import VerifiersChatEnv, check_env, env_revision

        agent = check_env(name, env, import_verifiers())
        make, kind = (lambda: VerifiersChatEnv(name, scorer, env, agent)), f"multi-turn ({type(env).__name__})"
        revision = f"{scorer.revision}-{env_revision(env)}"
    return register_env(EnvSpec(name=name, revision=revision, make=make,
                                generate=generate, expert=_reference_expert, reward_weights=scorer.weights, stop_strings=(),
                                description=f"the verifiers environment {target}, {kind}", verifier=name))


__all__ = ["install", "load_taskset", "VerifiersEnv", "VerifiersScorer"]
