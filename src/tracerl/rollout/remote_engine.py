"""An engine that samples through an OpenAI-compatible server returning token ids and log-probs.

`RemoteEngine(base_url, model, tokenizer).generate(prompts, ...)` sends each row as
`POST {base_url}/completions` with the prompt as token ids (`prompt: [ids]`), `logprobs: 1`,
`return_token_ids: true` (vLLM's extension; `tracerl serve` always returns them) and a seed drawn
from the caller's generator, and reads back the sampled ids (`choices[0].token_ids`) and their
log-probs (`choices[0].logprobs.token_logprobs`). So the agent loop can run on one machine while
the weights serve on another (`vllm serve`, SGLang, `tracerl serve`), token in, token out.

Weight-version tags: a server that reports `tracerl.policy_version` tags each sample with it;
otherwise the version set by `set_version` (what the trainer last pushed) is used. With
`expect_version`, a sample from any other version raises, so no stale sample is mistaken for
current. `load_weights(state_dict, version)` pushes the learner's weights as safetensors to
`POST {base_url}/weights?version=N` (a tracerl extension: `tracerl serve --accept-weights`); for
another server push them its own way and call `set_version`. Rows run concurrently (`max_concurrency` threads); stop strings and the EOS id travel
as `stop` / `stop_token_ids`.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import math
from collections.abc import Sequence

import httpx
import torch

from tracerl.rollout.sampling import Sample, row_seeds


@dataclasses.dataclass
class RemoteSample(Sample):
    policy_version: int = -1


class RemoteEngineError(RuntimeError):
    """The server refused or failed a call (its error message is kept)."""


class RemoteEngine:
    def __init__(self, base_url: str, model: str, tokenizer, *, api_key: str = "not-needed", timeout_s: float = 120.0,
                 max_concurrency: int = 8, expect_version: int | None = None):
        self.base_url, self.model, self.tokenizer = base_url.rstrip("/"), model, tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.version, self.expect_version = 0, expect_version
        self.max_concurrency = max_concurrency
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s,
                                  headers={"Authorization": f"Bearer {api_key}"})

    def set_version(self, version: int, *, expect: bool = False) -> None:
        """The weights version the server now holds (after a weight push); `expect` enforces it."""
        self.version = int(version)
        self.expect_version = self.version if expect else self.expect_version

    owns_weights = True  # the server samples from weights of its own: a sync copies them, the probe checks them

    def open_session(self):
        from tracerl.rollout.engine import StatelessSession

        return StatelessSession(self)  # the server sees every turn's full sequence (its prefix cache may help)

    def load_weights(self, state_dict, version: int) -> None:
        """Push `state_dict` (None: only the version) to the server and expect samples of `version` after it."""
        if state_dict is not None:
            from safetensors.torch import save

            body = save({k: v.detach().to("cpu").clone() for k, v in state_dict.items()})
            try:
                r = self._http.post("/weights", params={"version": int(version)}, content=body,
                                    headers={"Content-Type": "application/octet-stream"})
            except httpx.HTTPError as err:
                raise RemoteEngineError(f"{self.base_url} did not take the weights ({type(err).__name__}: {err})") from None
            if r.status_code != 200:
                raise RemoteEngineError(f"{self.base_url} refused the weights ({r.status_code}): {r.text[:200]}; start "
                                        "`tracerl serve --accept-weights`, or push weights your server's way and call "
                                        "set_version(version)")
        self.set_version(version, expect=state_dict is not None or self.expect_version is not None)

    def close(self) -> None:
        self._http.close()

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int | Sequence[int],
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 stop_strings: tuple[str, ...] = (), stop_token_ids: Sequence[int] = (),
                 generator: torch.Generator | None = None) -> list[RemoteSample]:
        budgets = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
        seeds = row_seeds(len(prompts), generator)
        bodies = [{"model": self.model, "prompt": [int(t) for t in p], "max_tokens": int(b), "temperature": temperature,
                   "top_p": top_p, "top_k": top_k, "seed": int(s), "logprobs": 1, "return_token_ids": True,
                   "stop": list(stop_strings) or None, "stop_token_ids": list(stop_token_ids) or None,
                   "include_stop_str_in_output": True, "skip_special_tokens": False}
                  for p, b, s in zip(prompts, budgets, seeds)]
        if len(bodies) == 1:
            return [self._one(bodies[0])]
        with cf.ThreadPoolExecutor(min(self.max_concurrency, len(bodies))) as pool:
            return list(pool.map(self._one, bodies))

    def generate_one(self, prompt: Sequence[int], *, seed: int, **kw) -> RemoteSample:
        """One row with an explicit seed (what `tracerl serve` reproduces exactly in-process)."""
        g = kw.pop("max_new_tokens")
        body = {"model": self.model, "prompt": [int(t) for t in prompt], "max_tokens": g, "seed": seed, "logprobs": 1,
                "return_token_ids": True, **kw}
        return self._one(body)

    def _one(self, body: dict) -> RemoteSample:
        body = {k: v for k, v in body.items() if v is not None}
        try:
            r = self._http.post("/completions", json=body)
        except httpx.HTTPError as err:
            raise RemoteEngineError(f"{self.base_url} did not answer ({type(err).__name__}: {err})") from None
        if r.status_code != 200:
            try:
                msg = r.json()["error"]["message"]
            except Exception:
                msg = r.text[:300]
            raise RemoteEngineError(f"{self.base_url} refused the call ({r.status_code}): {msg}")
        choice = r.json()["choices"][0]
        ids = choice.get("token_ids")
        lp = (choice.get("logprobs") or {}).get("token_logprobs")
        if ids is None or lp is None or len(ids) != len(lp):
            raise RemoteEngineError(f"{self.base_url} returned no token ids / log-probs; use a server that returns "
                                    "them (tracerl serve, or vLLM with return_token_ids)")
        version = (r.json().get("tracerl") or {}).get("policy_version", self.version)
        if self.expect_version is not None and version != self.expect_version:
            raise RemoteEngineError(f"{self.base_url} sampled with policy version {version}, expected "
                                    f"{self.expect_version}; push the weights or wait for the server to load them")
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return RemoteSample([int(t) for t in ids], [float(x) if x is not None and math.isfinite(x) else 0.0 for x in lp],
                            finish, [], policy_version=int(version))
