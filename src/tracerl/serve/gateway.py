"""The gateway: OpenAI chat and completion calls served by a tracerl engine, each recorded as a span.

Responses carry the vLLM-style extensions a trainer needs: `prompt_token_ids` (the ids the engine
saw), per choice `token_ids` (the ids it sampled) and, when asked, per-token log-probs under the
distribution actually sampled from; plus `tracerl: {span_id, episode_id, parent_span_id,
policy_version, extends_span}`. A call names its episode with the `X-Episode-Id` header or
`metadata.episode_id`, its parent span with `X-Parent-Span-Id` or `metadata.parent_span_id`.

Every check (model, parameters, episode, context length) runs before anything is sampled or
recorded, so a bad request changes nothing an episode holds.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Mapping

from tracerl.contract.roles import TokenRole
from tracerl.serve.batcher import EngineTimeout, EngineWorker
from tracerl.serve.chat import canonical, extend, render_full, reply_canonical, reply_message
from tracerl.serve.engine_proc import RemoteCallError
from tracerl.serve.episodes import BoundedDict, EpisodeRegistry
from tracerl.serve.errors import APIError, bad_request, not_found
from tracerl.serve.guard import PRINCIPAL_HEADER
from tracerl.serve.penalties import logit_adjust
from tracerl.serve.records import CallRecord
from tracerl.serve.rows import sample_rows
from tracerl.serve.schemas import ChatRequest, CompletionRequest
from tracerl.serve.tool_choice import pattern_for
from tracerl.serve.weights import apply_state, check_version, checked_state


def _context_limit(engine) -> int:
    config = getattr(engine.model, "config", None)
    return int(getattr(config, "max_position_embeddings", 0) or 1 << 20)


class Gateway:
    def __init__(self, engine, *, model_name: str = "tracerl", registry: EpisodeRegistry | None = None,
                 max_context: int | None = None, default_max_tokens: int = 256, stop_strings: tuple[str, ...] = (),
                 sampling_override: dict | None = None, max_batch: int = 16, seed: int = 0,
                 accept_weights: bool = False, api_keys: tuple[str, ...] = (), max_body_bytes: int = 1 << 20,
                 call_timeout_s: float = 300.0, body_timeout_s: float = 30.0, pool=None):
        self.engine, self.tokenizer, self.model_name = engine, engine.tokenizer, model_name
        # guard.py: every route needs one of `api_keys` (when any); bodies over `max_body_bytes` are refused
        self.api_keys, self.max_body_bytes, self.body_timeout_s = tuple(api_keys), max_body_bytes, body_timeout_s
        self.call_timeout_s = call_timeout_s  # the longest a call waits for the engine (503 after)
        self.registry = registry or EpisodeRegistry()
        self.max_context = max_context or _context_limit(engine)
        self.default_max_tokens, self.stop_strings = default_max_tokens, tuple(stop_strings)
        self.sampling_override = sampling_override  # a trainer pins the sampling its learner scores under
        self.worker = EngineWorker(engine, max_batch=max_batch, seed=seed, timeout_s=call_timeout_s)
        self.pool = pool  # serve/engine_pool.py: N engine processes sample the calls instead of `engine` here
        self.accept_weights = accept_weights  # POST /v1/weights (a trainer pushing new weights by version)
        self._sampled_text: BoundedDict = BoundedDict(8192)  # tool call id -> the text the model sampled for it
        self._pushed = False  # a weight push has been taken (versions must then increase strictly)
        self.created = int(time.time())

    # -- weights ---------------------------------------------------------------------------------
    @property
    def policy_version(self) -> int:
        return self.pool.version if self.pool is not None else self.worker.policy_version

    def set_policy_version(self, version: int) -> None:
        """Tag later samples with `version`; waits for the batch in flight (weights change between batches)."""
        if self.pool is not None:
            return self.pool.tell("version", version)
        if not self.worker.lock.acquire(timeout=self.call_timeout_s):
            raise TimeoutError(f"the gateway's engine stayed busy for {self.call_timeout_s:g} s; the policy version "
                               "was not changed")
        try:
            self.worker.policy_version = int(version)
        finally:
            self.worker.lock.release()

    def load_weights(self, state_dict, version: int) -> None:
        """New weights for the engine's model, tagged `version`, between two batches (docs/engines.md).
        Every tensor and the version are checked first (serve/weights.py); a refusal changes nothing."""
        own = self.engine.model.state_dict()
        check_version(int(version), self.policy_version, self._pushed)
        checked = checked_state(own, state_dict)
        if self.pool is not None:  # every engine loads them between two of its batches
            self.pool.push_state(checked, int(version))
            self._pushed = True
            return
        if not self.worker.lock.acquire(timeout=self.call_timeout_s):
            raise APIError(503, f"the engine stayed busy for {self.call_timeout_s:g} s; push the weights again",
                           type="server_error", code="engine_busy")
        try:
            check_version(int(version), self.policy_version, self._pushed)  # a push that raced this one
            apply_state(own, checked)
            self.worker.policy_version, self._pushed = int(version), True
        finally:
            self.worker.lock.release()

    @functools.cached_property
    def max_prompt_chars(self) -> int:
        """More characters than this cannot fit the context whatever they tokenize to (no token spells more
        than the vocabulary's longest token string), so such a request is refused before it is tokenized."""
        longest = max((len(t) for t in self.tokenizer.get_vocab()), default=1)
        return self.max_context * max(longest, 1)

    def close(self) -> None:
        self.worker.close()
        if self.pool is not None:
            self.pool.close()
        self.registry.close()

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": self.created,
                                            "owned_by": "tracerl", "policy_version": self.policy_version,
                                            "max_model_len": self.max_context}]}

    # -- calls -----------------------------------------------------------------------------------
    def chat(self, req: ChatRequest, headers: Mapping[str, str]) -> dict:
        episode, parent = self._checks(req, headers)
        pattern = pattern_for(req.tools, req.tool_choice, req.response_format)  # 400 before anything is sampled
        if req.top_logprobs and not req.logprobs:
            raise bad_request("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        canon = [canonical(m) for m in req.messages]
        ext, prompt, tools_used = None, None, []
        if episode is not None:
            for prev in reversed(episode.calls):
                ext = prev.kind == "chat" and extend(self.tokenizer, prev, canon, req.messages)
                if ext:
                    prompt, roles, tools_used = ext
                    ext = prev.span_id
                    break
        if prompt is None:
            prompt, roles = render_full(self.tokenizer, req.messages, req.tools, self._sampled_text)
            ext = None
        calls = self._sample("chat", req, prompt, roles, req.budget(), episode, parent, pattern=pattern,
                             top=(req.top_logprobs or 0) if req.logprobs else 0)
        choices = []
        for i, call in enumerate(calls):  # each sample is its own span
            message, is_call = reply_message(call.text, call.span_id, bool(req.tools) and req.tool_choice != "none")
            for tc in message.get("tool_calls") or []:
                self._sampled_text[tc["id"]] = call.text
            call.messages, call.reply, call.tool_names, call.extends_span = canon, reply_canonical(message), tools_used, ext
            if is_call and call.finish_reason == "stop":
                call.finish_reason = "tool_calls"
            self.registry.record(call)
            choices.append({"index": i, "message": message, "finish_reason": call.finish_reason,
                            "token_ids": call.completion_ids, "span_id": call.span_id,
                            "logprobs": {"content": self._logprob_entries(call)} if req.logprobs else None})
        return self._response("chat.completion", calls, choices)

    def completion(self, req: CompletionRequest, headers: Mapping[str, str]) -> dict:
        if req.echo:
            raise bad_request("'echo' is not supported; the prompt's ids are returned as 'prompt_token_ids'", param="echo")
        episode, parent = self._checks(req, headers)
        p = req.prompt
        if isinstance(p, list) and p and isinstance(p[0], (list, str)):
            if len(p) != 1:
                raise bad_request("send one prompt per request (a batch of prompts is not supported)", param="prompt")
            p = p[0]
        if isinstance(p, str):
            prompt = list(self.tokenizer(p, add_special_tokens=False)["input_ids"])
        else:
            prompt = [int(t) for t in p]
            vocab = len(self.tokenizer)
            if any(t < 0 or t >= vocab for t in prompt):
                raise bad_request(f"prompt token ids must lie in [0, {vocab}); this model's vocabulary has {vocab} tokens",
                                  param="prompt")
        if not prompt:
            raise bad_request("the prompt is empty; send at least one token", param="prompt")
        roles = [TokenRole.PROMPT] * len(prompt)
        calls = self._sample("completion", req, prompt, roles, req.budget(), episode, parent,
                             pattern=pattern_for(None, None, req.response_format), top=req.logprobs or 0)
        choices, last = [], episode.calls[-1] if episode is not None and episode.calls else None
        for i, call in enumerate(calls):
            if last is not None:
                if prompt[:len(last.prompt_ids) + len(last.completion_ids)] == last.prompt_ids + last.completion_ids:
                    call.extends_span = last.span_id
                    n = len(last.prompt_ids) + len(last.completion_ids)
                    call.prompt_roles = roles[:n] + [TokenRole.OBSERVATION] * (len(prompt) - n)  # came back to the agent
            self.registry.record(call)
            lp = None
            if req.logprobs is not None:
                toks = [self.tokenizer.decode([t]) for t in call.completion_ids]
                offsets, pos = [], 0
                for t in toks:
                    offsets.append(pos)
                    pos += len(t)
                tops = [{self.tokenizer.decode([t]): v for t, v in row} for row in call.top_logprobs] \
                    if call.top_logprobs is not None else None
                lp = {"tokens": toks, "token_logprobs": call.logprobs, "text_offset": offsets, "top_logprobs": tops}
            text = call.text if req.skip_special_tokens else self.tokenizer.decode(call.completion_ids)
            choices.append({"index": i, "text": text, "finish_reason": call.finish_reason,
                            "token_ids": call.completion_ids, "span_id": call.span_id, "logprobs": lp})
        return self._response("text_completion", calls, choices)

    # -- shared ----------------------------------------------------------------------------------
    def _checks(self, req, headers: Mapping[str, str]):
        if req.model != self.model_name:
            raise not_found(f"the model {req.model!r} does not exist; this gateway serves {self.model_name!r} "
                            "(GET /v1/models)", param="model", code="model_not_found")
        messages, prompt = getattr(req, "messages", None) or [], getattr(req, "prompt", None)
        texts = [prompt] if isinstance(prompt, str) else [x for x in prompt or [] if isinstance(x, str)]
        chars = sum(len(m.text()) for m in messages) + sum(map(len, texts))
        if chars > self.max_prompt_chars:
            raise bad_request(f"the prompt has {chars} characters, more than this model's {self.max_context}-token context "
                              "can hold; shorten the messages", param="messages", code="context_length_exceeded")
        vocab = len(self.tokenizer)
        if any(not 0 <= t < vocab for t in req.stop_token_ids or ()):
            raise bad_request(f"'stop_token_ids' must lie in [0, {vocab}), this model's vocabulary", param="stop_token_ids")
        if req.top_k is not None and req.top_k > vocab:
            raise bad_request(f"'top_k' {req.top_k} is larger than this model's vocabulary ({vocab}); send at most "
                              f"{vocab}, or 0 for no limit", param="top_k")
        meta = req.metadata or {}
        eid = headers.get("x-episode-id") or meta.get("episode_id")
        parent = headers.get("x-parent-span-id") or meta.get("parent_span_id")
        token = headers.get("x-episode-token") or meta.get("episode_token")
        episode = None
        if eid:
            episode = self.registry.open_episode(str(eid), principal=headers.get(PRINCIPAL_HEADER, ""),
                                                 token=str(token) if token else None)
        return episode, (str(parent) if parent else None)

    def _sample(self, kind, req, prompt, roles, budget, episode, parent, *, pattern=None, top: int = 0) -> list[CallRecord]:
        room = self.max_context - len(prompt)
        if room <= 0 or (budget is not None and budget > room):
            want = budget or 1
            raise bad_request(f"this model's context is {self.max_context} tokens, but the prompt has {len(prompt)} "
                              f"and {want} more were requested; shorten the messages or lower max_tokens",
                              param="max_tokens" if room > 0 else "messages", code="context_length_exceeded")
        budget = budget or min(self.default_max_tokens, room)
        sampling = {"temperature": 1.0 if req.temperature is None else req.temperature,
                    "top_p": 1.0 if req.top_p is None else req.top_p, "top_k": req.top_k or 0}
        if self.sampling_override:
            sampling = {**sampling, **self.sampling_override}
        stops = tuple(dict.fromkeys([*self.stop_strings, *req.stops()]))
        adjust = logit_adjust(req, len(self.tokenizer))  # 400 on a key that is no token id, before sampling
        t0 = time.time()
        try:
            args = (prompt, budget, sampling, stops, req.seed, tuple(int(t) for t in req.stop_token_ids or ()))
            kw = dict(n=req.n, pattern=pattern, top_logprobs=top, adjust=adjust)
            if self.pool is not None:  # the episode's engine (serve/engine_pool.py)
                rows, served_by = self.pool.sample(episode.episode_id if episode else None, *args, **kw)
            else:
                rows, served_by = sample_rows(self, *args, **kw), 0
        except APIError:
            raise
        except RemoteCallError as err:  # the engine process refused or failed the call: its status and sentence
            raise APIError(err.status, str(err), type="invalid_request_error" if err.status < 500 else "server_error",
                           code=err.code) from None
        except EngineTimeout:
            raise APIError(503, f"the engine did not answer within {self.call_timeout_s:g} s (busy or stuck); retry "
                           "the call later", type="server_error", code="engine_timeout") from None
        except Exception as err:
            raise APIError(500, f"the engine failed on this call ({type(err).__name__}: {str(err)[:200]}); "
                           "nothing was recorded, retry the call", type="server_error", code="engine_error") from None
        extra = {"constraint": pattern.name} if pattern is not None else {}
        extra |= adjust.describe() if adjust is not None else {}
        return [CallRecord(span_id=uuid.uuid4().hex[:12], kind=kind, episode_id=episode.episode_id if episode else None,
                           parent_span_id=parent, model=req.model, prompt_ids=list(prompt), prompt_roles=list(roles),
                           completion_ids=list(sample.token_ids), logprobs=list(sample.logprobs),
                           finish_reason=sample.finish, policy_version=version,
                           sampling={**sampling, "seed": req.seed, "max_tokens": budget, "stop": list(stops), **extra},
                           started=t0, latency_s=time.time() - t0, entropies=list(sample.entropies),
                           text=self.tokenizer.decode(sample.token_ids, skip_special_tokens=True), top_logprobs=tops,
                           user=req.user, metadata=req.metadata, engine=served_by)
                for sample, version, tops in rows]

    def _logprob_entries(self, call: CallRecord) -> list[dict]:
        def entry(t, lp):
            piece = self.tokenizer.decode([t])
            return {"token": piece, "logprob": lp, "bytes": list(piece.encode())}
        tops = call.top_logprobs or [[] for _ in call.completion_ids]
        return [{**entry(t, lp), "top_logprobs": [entry(a, b) for a, b in top]}
                for t, lp, top in zip(call.completion_ids, call.logprobs, tops)]

    def _response(self, obj: str, calls: list[CallRecord], choices: list[dict]) -> dict:
        call, done = calls[0], sum(len(c.completion_ids) for c in calls)
        return {"id": ("chatcmpl-" if obj == "chat.completion" else "cmpl-") + call.span_id, "object": obj,
                "created": int(call.started), "model": self.model_name, "choices": choices,
                "usage": {"prompt_tokens": len(call.prompt_ids), "completion_tokens": done,
                          "total_tokens": len(call.prompt_ids) + done},
                "prompt_token_ids": call.prompt_ids,
                "tracerl": {"span_id": call.span_id, "span_ids": [c.span_id for c in calls], "episode_id": call.episode_id,
                            "parent_span_id": call.parent_span_id, "policy_version": call.policy_version,
                            "extends_span": call.extends_span, "engine": call.engine}}
