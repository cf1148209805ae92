"""A verifiers 0.4 multi-turn `Env` (its `run(task, agents)` drives a conversation) played by tracerl's policy.

    class GuessConfig(vf.EnvConfig):
        assistant: vf.AgentConfig = vf.AgentConfig()      # the one agent: tracerl's policy

    class GuessEnv(vf.Env[GuessConfig]):
        async def run(self, task, agents):
            async with agents.assistant.interaction(task) as chat:
                seg = await chat.turn()                    # the policy answers the task's prompt
                while not seg.terminated and seg.last_reply != task.data.answer:
                    seg = await chat.turn("No, try again.")  # the env's next user message

In verifiers 0.4 this is how a multi-turn environment is written (0.3's `MultiTurnEnv.env_response`
became the env's `run` loop over `Interaction.turn`). Here the env's `run` is driven turn by turn
from tracerl's agent loop: `agents.<name>.interaction(task)` opens a tracerl episode, each
`turn(message)` hands the message to the policy as the next user turn (rendered in the chat
template's user role after the sampled reply, `rollout/render.render_user_turn`) and returns the
policy's reply as a `Segment`; when `run` returns, the conversation is a verifiers `Trace` (every
reply a sampled assistant node) and `Task.score(trace)` gives the reward components. Every sampled
token keeps its id, log-prob and policy version, as in any tracerl episode.

The coroutine is stepped by hand (`send`), without an event loop: `run` may await its
interactions, plain coroutines and `asyncio.sleep(0)`; awaiting I/O (an asyncio future, a
timeout context) ends the episode as `infra_failure` with that reason. One agent per env (the
policy): an env declaring several (a user simulator with its own model, a judge agent) and an env
overriding `finalize` are refused before any rollout. An episode that tracerl ends first (env.max_turns,
env.max_tokens) is closed without a score, as every tracerl episode that runs out of budget.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs.adapters._common import import_verifiers, task_messages
from tracerl.envs.base import Message, Step
from tracerl.errors import UserError


class _Ask:
    """What `turn` yields to the driver: the env's next user messages (None: take the opening reply)."""

    def __init__(self, interaction: _Interaction, messages: list[Message] | None):
        self.interaction, self.messages = interaction, messages

    def __await__(self):
        reply = yield self
        return reply


class _Interaction:
    """`Interaction` as an env's `run` uses it: `turn`, `trace`."""

    def __init__(self, vf, task, agent_name: str):
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask

        self.vf, self.task, self.started, self.over = vf, task, False, False
        self.trace = Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                           agent=AgentInfo(config=vf.AgentConfig(), name=agent_name))

    def _add(self, message, sampled: bool = False) -> None:
        from verifiers.v1.graph import MessageNode

        parent = len(self.trace.nodes) - 1 if self.trace.nodes else None
        self.trace.nodes.append(MessageNode(parent=parent, message=message, sampled=sampled))

    async def turn(self, message: Any = None):
        from verifiers.v1.agent import Segment

        if self.over:
            raise RuntimeError("the exchange is over; read interaction.trace")
        prompted = not self.started and self.task.data.prompt is not None
        if message is None and not prompted:
            raise ValueError("nothing to run a turn on: a bare turn() takes a prompted task's opening reply")
        if message is not None and prompted:
            raise ValueError("the task's prompt opens this exchange: take its first reply with a bare turn()")
        if not self.started:

            for m in task_messages(self.task.data):
                self._add(self._typed(m))
        self.started = True
        msgs = None if message is None else [message] if isinstance(message, str) else list(message)
        user: list[Message] = []
        for m in msgs or []:
            m = {"role": "user", "content": m} if isinstance(m, str) else (
                m.model_dump() if hasattr(m, "model_dump") else dict(m))
            if not isinstance(m.get("content"), str):
                raise ValueError("a turn message with non-text content cannot be rendered by tracerl yet")
            user.append({"role": m.get("role", "user"), "content": m["content"]})
            self._add(self._typed(user[-1]))
        reply = await _Ask(self, user or None)
        if reply is None:  # tracerl ended the episode (budget): the run is closed without a score
            self.over = True
            return Segment(messages=[], terminated=True)
        msg = self.vf.AssistantMessage(content=reply)
        self._add(msg, sampled=True)
        return Segment(messages=[msg], root_reply=reply)

    def _typed(self, m: Message):
        vf = self.vf
        cls = {"system": vf.SystemMessage, "assistant": vf.AssistantMessage}.get(m["role"], vf.UserMessage)
        return cls(content=m["content"])


class _Agent:
    def __init__(self, vf, name: str, opened: list):
        self.vf, self.name, self.opened, self.trainable = vf, name, opened, True

    @contextlib.asynccontextmanager
    async def interaction(self, task, **kwargs):
        if self.opened:
            raise RuntimeError("tracerl plays one interaction per episode; this run() opened a second one")
        self.opened.append(_Interaction(self.vf, task, self.name))
        yield self.opened[-1]


class _Agents:
    def __init__(self, vf, name: str, opened: list):
        self._name, self._agent = name, _Agent(vf, name, opened)

    def __getattr__(self, name: str):
        if name.startswith("_") or name != self.__dict__.get("_name"):
            raise AttributeError(f"no agent {name!r}; this config declares [{self.__dict__.get('_name')!r}]")
        return self._agent


class _NeedsLoop(Exception):
    pass


def check_env(name: str, env, vf) -> str:
    """The one agent's name; a UserError for an env tracerl cannot play (several agents, a `finalize`)."""
    agents = list(getattr(env, "_agent_specs", {}) or {})
    if len(agents) != 1:
        raise UserError(f"{name}: the verifiers env {type(env).__name__} declares {len(agents)} agents "
                        f"({', '.join(agents) or 'none'}); tracerl's policy plays one, so declare exactly one AgentConfig")
    if type(env).finalize is not vf.Env.finalize:
        raise UserError(f"{name}: the verifiers env {type(env).__name__} overrides finalize(), which tracerl does not run "
                        "yet; score in the task's @vf.reward functions")
    return agents[0]


def env_revision(env) -> str:
    import inspect

    try:
        text = inspect.getsource(type(env))
    except (OSError, TypeError):
        text = type(env).__qualname__
    return hashlib.sha256(text.encode()).hexdigest()[:8]


class VerifiersChatEnv:
    """One verifiers task played as a conversation driven by the verifiers env's `run`."""

    revision = "verifiers-chat-env-1"

    def __init__(self, name: str, scorer, env, agent: str):

        self.name, self.scorer, self.env, self.agent, self.vf = name, scorer, env, agent, import_verifiers()
        self.coro = None
        self.opened: list[_Interaction] = []
        self.replies: list[str] = []
        self.task: Task | None = None

    async def _episode(self, vf_task):
        agents = _Agents(self.vf, self.agent, self.opened)
        await self.env.setup(agents)
        await self.env.run(vf_task, agents)

    def _advance(self, value):
        """Run the env's coroutine until it asks for the policy's next reply (an `_Ask`) or returns (None)."""
        while True:
            try:
                got = self.coro.send(value)
            except StopIteration:
                self.coro = None
                return None
            if isinstance(got, _Ask):
                return got
            if got is not None:  # an asyncio future: it needs an event loop, which this driver does not run
                self.coro.close()
                self.coro = None
                raise _NeedsLoop(f"{type(self.env).__name__}.run() awaited {type(got).__name__}; tracerl drives run() "
                                 "turn by turn and it may await only its interactions and plain coroutines")
            value = None  # a bare yield (asyncio.sleep(0))

    def reset(self, task: Task, seed: int) -> list[Message]:
        if self.coro is not None:
            self.coro.close()
        self.task, self.replies, self.opened[:] = task, [], []
        self.coro = self._episode(self.scorer.vf_tasks[task.id])
        ask = self._advance(None)
        if ask is None:
            raise RuntimeError(f"{type(self.env).__name__}.run() ended without a turn of the policy")

        return task_messages(ask.interaction.task.data) + list(ask.messages or [])

    def step(self, action_text: str) -> Step:
        self.replies.append(action_text)
        ident = {"verifier": self.name, "verifier_revision": self.scorer.revision}
        try:
            ask = self._advance(action_text)
            if ask is not None:
                if not ask.messages:
                    raise RuntimeError("a turn after the first must carry the env's next message")
                return Step(observation="\n".join(m["content"] for m in ask.messages),
                            info={"observation_role": "user", **ident})
            interaction = self.opened[0]
            comps = self.scorer.score_trace(interaction.task, interaction.trace)
        except Exception as err:  # an env or reward error is an infra fault, never a reward of 0
            return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE,
                        info={"infra": f"{type(err).__name__}: {err}"[:300], **ident})
        return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components=comps,
                    info={"turns": len(self.replies), **ident})

    def state_hash(self) -> str:
        key = (self.task.id if self.task else None, tuple(self.replies))
        return hashlib.sha256(repr(key).encode()).hexdigest()[:16]

    def __del__(self):  # an episode tracerl ended first: close the env's coroutine (no never-awaited warning)
        coro = getattr(self, "coro", None)
        if coro is not None:
            with contextlib.suppress(Exception):
                coro.close()


__all__ = ["VerifiersChatEnv", "check_env", "env_revision"]
