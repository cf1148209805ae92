"""Request bodies of the gateway: the OpenAI fields it honours, plus the vLLM / tracerl extensions.

No field is silently dropped (docs/gateway.md, "Fields"): an OpenAI field is honoured (penalties and
`logit_bias` change the logits sampled from, serve/penalties.py), recorded on the span (`user`,
`metadata`), or, where the gateway cannot do what a non-default value asks (`store: true`, a service
tier, reasoning settings, audio, ...), refused with a 400 naming it; a field OpenAI does not define
either is a 400 "unrecognized request argument", as OpenAI answers. Messages are checked strictly, so
a malformed conversation is a 400 naming the message. Every number that reaches the engine has bounds
(a seed fits a torch generator, a budget fits any context, a temperature is finite).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

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


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)  # unknown fields are refused by name in _fields
    _REFUSED: ClassVar[dict[str, tuple[tuple, str]]] = {}  # field -> (values honoured, why another is refused)
    model: str
    temperature: float | None = Field(None, ge=0.0, le=100.0, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=0, le=MAX_TOKENS)  # vLLM extension (0: no limit; at most the vocabulary)
    stop: Stop | list[Stop] | None = Field(None, max_length=16)
    # vLLM extension: token ids that end the completion (beside EOS)
    stop_token_ids: list[TokenId] | None = Field(None, max_length=64)
    seed: int | None = Field(None, ge=-INT64, lt=INT64)  # what torch.Generator().manual_seed takes
    # serve/penalties.py: added to the logits before temperature / top-p / top-k
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0, allow_inf_nan=False)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0, allow_inf_nan=False)
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]] | None = Field(
        None, max_length=1024)
    user: str | None = Field(None, max_length=256)  # recorded on the span
    store: Any = None
    service_tier: Any = None
    n: int = Field(1, ge=1, le=16)  # the samples of one call, one engine batch, each its own span
    stream: bool = False  # server-sent events (serve/streaming.py), sent once the samples are drawn
    stream_options: dict[str, Any] | None = None  # {"include_usage": true}: a last chunk with the usage
    response_format: dict[str, Any] | None = None  # text | json_object, enforced by constrained decoding
    metadata: dict[str, Any] | None = None  # recorded on the span; episode_id / parent_span_id may ride here

    @model_validator(mode="after")
    def _fields(self):
        for name in self.model_extra or {}:
            raise ValueError(f"unrecognized request argument {name[:64]!r}; this gateway takes the OpenAI fields and "
                             "the vLLM extensions listed in docs/gateway.md")
        for name, (ok, why) in {**_COMMON_REFUSED, **self._REFUSED}.items():
            if getattr(self, name) not in ok:
                raise ValueError(f"{name!r} = {getattr(self, name)!r} is not supported: {why}")
        return self

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


_COMMON_REFUSED = {
    "store": ((None, False), "nothing is stored here; send store=false or omit it"),
    "service_tier": ((None, "auto", "default"), "one tier serves every call; send 'auto' or omit it"),
}


class ChatRequest(_Sampling):
    _REFUSED: ClassVar[dict] = {
        "reasoning_effort": ((None,), "this model has no reasoning settings; omit it"),
        "verbosity": ((None,), "this model has no verbosity setting; omit it"),
        "audio": ((None,), "this gateway serves text only; omit it"),
        "modalities": ((None, ["text"]), "this gateway serves text only; send ['text'] or omit it"),
        "prediction": ((None,), "predicted outputs are not used here; omit it"),
        "web_search_options": ((None,), "this gateway has no web search; omit it"),
        "functions": ((None,), "the legacy field is not served; send 'tools'"),
        "function_call": ((None,), "the legacy field is not served; send 'tool_choice'"),
    }
    reasoning_effort: Any = None
    verbosity: Any = None
    audio: Any = None
    modalities: Any = None
    prediction: Any = None
    web_search_options: Any = None
    functions: Any = None
    function_call: Any = None
    parallel_tool_calls: bool | None = None  # false is kept only where tool_choice forces one call
    messages: list[ChatMessage] = Field(min_length=1, max_length=4096)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    logprobs: StrictBool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)  # the k likeliest tokens under the sampled distribution

    def budget(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @model_validator(mode="after")
    def _one_call(self):
        forced = self.tool_choice == "required" or isinstance(self.tool_choice, dict)
        if self.parallel_tool_calls is False and self.tools and not forced:
            raise ValueError("'parallel_tool_calls': false is kept only with a tool_choice that forces one call "
                             "('required' or a named function); the model may write several calls otherwise")
        return self


class CompletionRequest(_Sampling):
    _REFUSED: ClassVar[dict] = {
        "best_of": ((None, 1), "send 'n' for several samples; every sample is returned"),
        "suffix": ((None, ""), "insertion after a suffix is not supported; omit it"),
        "return_token_ids": ((None, True), "token ids are always returned (vLLM extension)"),
        "include_stop_str_in_output": ((None, True), "the text always ends with the stop string the sampled "
                                                     "token ids spell (vLLM extension)"),
    }
    best_of: Any = None
    suffix: Any = None
    return_token_ids: Any = None
    include_stop_str_in_output: Any = None
    skip_special_tokens: StrictBool = True  # vLLM extension: false keeps special tokens in the returned text
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
