"""The `Engine` protocol: what the agent loop, the probe and the trainer ask of a rollout engine.

Token ids in, token ids and behavior log-probabilities out (docs/engines.md):

- `generate(prompts, *, max_new_tokens, temperature, top_p, top_k, stop_strings, stop_token_ids,
  generator) -> list[Sample]`: one `Sample` per prompt (token-id lists; no re-tokenization). Each
  sampled token's log-probability is under the *processed* distribution it was drawn from
  (temperature, then top-k / top-p; `algorithms.logprobs.process_logits`), which is what the
  learner rescoring uses, so an on-policy ratio starts at 1; greedy (temperature 0) is a point
  mass, log-prob 0. A row stops at the first token that is in `stop_token_ids` or ends a stop
  string (the stop token is kept, `finish="stop"`), or at its own budget (`max_new_tokens` is one
  int or one per row, `finish="length"`). `generator` is the seed: the same generator state gives
  the same tokens for the same prompts and settings.
- `open_session() -> Session`: a session is called once per turn with every episode's full token
  sequence under a stable key (`Session.generate(keys, sequences, **same keywords)`); an engine
  may keep each key's cache across calls (the torch engine does) or feed everything again
  (`StatelessSession`).
- `load_weights(state_dict, version)`: the learner's weights after an update, by version. An
  engine that shares the learner's module (`owns_weights` False: the torch engine in process)
  only records the version; one that holds its own copy (HF generate on a copy, vLLM, a remote
  server) loads the tensors: the policy as a plain model (`models/weights.plain_state_dict`, a LoRA
  policy's adapters merged in). `sync_weights` below is the one call the trainer makes.
- `tokenizer`, `pad_id`, `version`, `owns_weights`.

`tests/rollout/test_engine_conformance.py` checks every engine against this contract.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from tracerl.rollout.sampling import Sample


@runtime_checkable
class Session(Protocol):
    def generate(self, keys: Sequence[Hashable], sequences: Sequence[Sequence[int]], *,
                 max_new_tokens: int | Sequence[int], temperature: float = 1.0, top_p: float = 1.0,
                 top_k: int = 0, stop_strings: tuple[str, ...] = (), stop_token_ids: Sequence[int] = (),
                 generator: torch.Generator | None = None) -> list[Sample]: ...


@runtime_checkable
class Engine(Protocol):
    tokenizer: Any
    pad_id: int
    version: int

    @property
    def owns_weights(self) -> bool: ...

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int | Sequence[int],
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 stop_strings: tuple[str, ...] = (), stop_token_ids: Sequence[int] = (),
                 generator: torch.Generator | None = None) -> list[Sample]: ...

    def open_session(self) -> Session: ...

    def load_weights(self, state_dict: Mapping[str, torch.Tensor] | None, version: int) -> None: ...


def base_engine(engine):
    """The engine under wrappers that forward to `.inner` (faults.FaultyEngine)."""
    while hasattr(type(engine), "__getattr__") and "inner" in getattr(engine, "__dict__", {}):
        engine = engine.inner
    return engine


def owns_weights(engine) -> bool:
    """Whether `engine` samples from weights of its own (which a sync must copy, and the probe check)."""
    return bool(getattr(base_engine(engine), "owns_weights", False))


def sync_weights(engine, model, version: int) -> bool:
    """Give `engine` the learner `model`'s weights as `version`; True when tensors were copied.

    An engine that shares the learner's module gets the version only (no tensor moves, no token of
    the sync path changes); one with its own copy gets the plain weights (LoRA merged in); an engine
    without `load_weights` (a test double) is left alone.
    """
    from tracerl.models.weights import plain_state_dict

    eng = base_engine(engine)
    if not hasattr(eng, "load_weights"):
        return False
    copy = owns_weights(eng)
    eng.load_weights(plain_state_dict(model) if copy else None, int(version))
    return copy


def sleep_engine(engine) -> None:
    """Free an engine's own weight copy while the learner updates (`sleep`, where the engine has it); the
    publish after the update loads the new version into it. An engine on the learner's module is left alone."""
    eng = base_engine(engine)
    if owns_weights(eng) and hasattr(eng, "sleep"):
        eng.sleep()
