"""Request bodies of the gateway: the OpenAI fields it honours, plus the vLLM / tracerl extensions.

Fields an OpenAI client may send and the gateway does not use are ignored (`extra="ignore"`);
messages are checked strictly, so a malformed conversation is a 400 naming the message. Every number
that reaches the engine has bounds (a seed fits a torch generator, a budget fits any context, a
temperature is finite), and the OpenAI fields the gateway accepts but does not apply (penalties,
`logit_bias`, `user`) are range-checked as OpenAI does, so an out-of-range value is a 400, not silence.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

MAX_TOKENS = 1 << 20  # no context is longer; a budget above it is refused before the context check
INT64 = 1 << 63
Text = Annotated[str, Field(max_length=1 << 20)]
Stop = Annotated[str, Field(min_length=1, max_length=1024)]
TokenId = Annotated[int, Field(ge=0, lt=1 << 31)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # strict: no "5" or true for a number


class FunctionCall(BaseModel):
    model_config = ConfigDict(strict=True)
    name: str = Field(max_length=256)
    arguments: Text = "{}"


class ToolCallIn(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    id: str = Field(max_length=256)
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCallIn] | None = Field(None, max_length=128)
    tool_call_id: str | None = Field(None, max_length=256)
    name: str | None = Field(None, max_length=256)

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
    temperature: float | None = Field(None, ge=0.0, le=100.0, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=0, le=MAX_TOKENS)  # vLLM extension (0: no limit; at most the vocabulary)
    stop: Stop | list[Stop] | None = Field(None, max_length=16)
    # vLLM extension: token ids that end the completion (beside EOS)
    stop_token_ids: list[TokenId] | None = Field(None, max_length=64)
    seed: int | None = Field(None, ge=-INT64, lt=INT64)  # what torch.Generator().manual_seed takes
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0, allow_inf_nan=False)  # accepted, not applied
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0, allow_inf_nan=False)  # accepted, not applied
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]] | None = Field(
        None, max_length=1024)  # accepted, not applied
    user: str | None = Field(None, max_length=256)
    n: int = Field(1, ge=1, le=16)  # the samples of one call, one engine batch, each its own span
    stream: bool = False  # server-sent events (serve/streaming.py), sent once the samples are drawn
    stream_options: dict[str, Any] | None = None  # {"include_usage": true}: a last chunk with the usage
    response_format: dict[str, Any] | None = None  # text | json_object, enforced by constrained decoding
    metadata: dict[str, Any] | None = None  # episode_id / parent_span_id may ride here

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1, max_length=4096)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    logprobs: StrictBool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)  # the k likeliest tokens under the sampled distribution

    def budget(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1, le=MAX_TOKENS)
    logprobs: int | None = Field(None, ge=0, le=20)  # the sampled token's log-prob and the k likeliest tokens
    echo: bool = False

    def budget(self) -> int | None:
        return self.max_tokens


class EpisodeStart(_Body):
    episode_id: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    task_id: str | None = Field(None, max_length=256)
    group_id: str | None = Field(None, max_length=256)
    metadata: dict[str, Any] = Field(default_factory=dict, max_length=64)


class EpisodeFinish(_Body):
    reward: float | None = Field(None, ge=-1e9, le=1e9, allow_inf_nan=False)
    task_id: str | None = Field(None, max_length=256)
    answer: Text | None = None  # the agent's final answer for the task's verifier (default: the last completion)
    error: Text | None = None  # the agent failed: the episode ends as infra_failure, no reward

    @model_validator(mode="after")
    def _one(self) -> EpisodeFinish:
        if self.error is None and self.reward is None and self.task_id is None:
            raise ValueError("finish an episode with a 'reward', a 'task_id' whose verifier runs, or an 'error'")
        if self.reward is not None and self.task_id is not None:
            raise ValueError("give either 'reward' or 'task_id', not both")
        return self
