"""Request bodies of the gateway: the OpenAI fields it honours, plus the vLLM / tracerl extensions.

Fields an OpenAI client may send and the gateway does not use are ignored (`extra="ignore"`);
messages are checked strictly, so a malformed conversation is a 400 naming the message.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionCall(BaseModel):
    name: str
    arguments: str = "{}"


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ChatMessage:
        if isinstance(self.content, list):
            if any(p.get("type") != "text" or not isinstance(p.get("text"), str) for p in self.content):
                raise ValueError("content parts must be {'type': 'text', 'text': ...}; this gateway serves text only")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        return self

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p["text"] for p in self.content)
        return self.content or ""


class _Sampling(_Body):
    model: str
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)  # vLLM extension
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None  # vLLM extension: token ids that end the completion (beside EOS)
    seed: int | None = None
    n: int = Field(1, ge=1, le=16)  # the samples of one call, one engine batch, each its own span
    stream: bool = False  # server-sent events (serve/streaming.py), sent once the samples are drawn
    stream_options: dict[str, Any] | None = None  # {"include_usage": true}: a last chunk with the usage
    response_format: dict[str, Any] | None = None  # text | json_object, enforced by constrained decoding
    metadata: dict[str, Any] | None = None  # episode_id / parent_span_id may ride here

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)  # the k likeliest tokens under the sampled distribution

    def budget(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=20)  # the sampled token's log-prob and the k likeliest tokens
    echo: bool = False

    def budget(self) -> int | None:
        return self.max_tokens


class EpisodeStart(_Body):
    episode_id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    task_id: str | None = None
    group_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class EpisodeFinish(_Body):
    reward: float | None = Field(None, allow_inf_nan=False)
    task_id: str | None = None
    answer: str | None = None  # the agent's final answer for the task's verifier (default: the last completion)
    error: str | None = None  # the agent failed: the episode ends as infra_failure, no reward

    @model_validator(mode="after")
    def _one(self) -> EpisodeFinish:
        if self.error is None and self.reward is None and self.task_id is None:
            raise ValueError("finish an episode with a 'reward', a 'task_id' whose verifier runs, or an 'error'")
        if self.reward is not None and self.task_id is not None:
            raise ValueError("give either 'reward' or 'task_id', not both")
        return self
