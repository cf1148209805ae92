"""A judge behind an OpenAI-compatible endpoint (`tracerl serve`, vLLM, SGLang, a hosted API).

The remote twin of `learned_grader.LearnedGrader`, with the same interface (`grade`, `calibrate`,
`manifest`, `verify`), so `roles.grader` runs it beside or instead of the env's verifier and it is
calibrated on the environments' audit sets before it grades anything (verifiers/calibration.py).

Each (question, response) is one chat call: the prompt template with the response fenced exactly as
the local judge fences it (`<<<`/`>>>` inside the response are broken, so it cannot close its own
fence), `max_tokens=1`, `temperature=0`, `logprobs` with the top 20 alternatives. The verdict's
`p_yes = P(yes) / (P(yes) + P(no))` over the alternatives whose stripped, lower-cased text is "yes" or
"no". Where the server gives no log-probs, or neither word is among them, the reply's text is parsed:
yes → 1, no → 0, anything else → 0 (a judge that does not answer does not accept), counted in
`parsed`. Where this departs from verifiers' `JudgeRubric`: the judge answers one word, not a free
explanation, so the score is a probability a threshold can be calibrated on.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tracerl.errors import UserError
from tracerl.verifiers.base import AuditCase, VerifierResult, task_field, text_of
from tracerl.verifiers.learned_grader import DEFAULT_PROMPT, FENCE, Verdict

TOP_LOGPROBS = 20


def fenced_prompt(template: str, question: str, response: str) -> str:
    """The judge's user message: `response` with its fence markers broken, in the template."""
    safe = response.replace(FENCE[0], "<< <").replace(FENCE[1], "> >>")
    fill = {"{question}": question, "{response}": safe}
    return re.sub(r"\{question\}|\{response\}", lambda m: fill[m.group(0)], template)  # one pass: no text is re-read


def p_yes_of(choice: Any) -> tuple[float, bool]:
    """(P(yes) / (P(yes) + P(no)), parsed): from the first token's top log-probs, else the reply's text."""
    content = (getattr(choice.logprobs, "content", None) or []) if getattr(choice, "logprobs", None) else []
    if content:
        p = {"yes": 0.0, "no": 0.0}
        first = content[0]
        alts = list(getattr(first, "top_logprobs", None) or []) or [first]
        for alt in alts:
            word = (alt.token or "").strip().lower()
            if word in p and alt.logprob is not None and math.isfinite(alt.logprob):
                p[word] += math.exp(alt.logprob)
        if p["yes"] + p["no"] > 0:
            return p["yes"] / (p["yes"] + p["no"]), False
    text = (choice.message.content or "").strip().lower()
    return (1.0 if text.startswith("yes") else 0.0), True


class RemoteJudge:
    """A yes/no judge model behind `url` (an OpenAI-compatible `/v1`), called with the `openai` client."""

    components = ("judge",)
    primary = "judge"

    def __init__(self, url: str, model: str, *, prompt: str = DEFAULT_PROMPT, threshold: float = 0.5,
                 api_key_env: str | None = None, timeout_s: float = 60.0, concurrency: int = 8,
                 name: str = "remote_judge", audit: Sequence[AuditCase] = ()):
        if "{question}" not in prompt or "{response}" not in prompt:
            raise ValueError("the grader prompt must contain {question} and {response}")
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"grader threshold must be in (0, 1), got {threshold}")
        try:
            import openai
        except ImportError:
            raise UserError("roles.grader.url needs the openai client; pip install 'tracerl[serve]'") from None
        key = "unused"
        if api_key_env:
            key = os.environ.get(api_key_env, "")
            if not key:
                raise UserError(f"roles.grader.api_key_env names {api_key_env}, which is not set; export it or drop "
                                "api_key_env for a server without a key")
        self.client = openai.OpenAI(base_url=url, api_key=key, timeout=timeout_s, max_retries=2)
        self.url, self.model_name, self.prompt, self.threshold = url, model, prompt, threshold
        self.concurrency = concurrency
        self.name = name
        self.prompt_sha256 = hashlib.sha256(prompt.encode()).hexdigest()
        self.model_sha256 = hashlib.sha256(f"{url}|{model}".encode()).hexdigest()  # the endpoint, not the weights
        self.parsed = 0  # verdicts read from the reply's text (no usable log-probs)
        self._audit = list(audit)
        self.calibration = None
        self._set_revision()

    def _set_revision(self) -> None:
        self.revision = hashlib.sha256(f"{self.prompt_sha256}:{self.url}:{self.model_name}:{self.threshold}"
                                       .encode()).hexdigest()[:16]

    def manifest(self) -> dict[str, Any]:
        out = {"name": self.name, "revision": self.revision, "prompt_sha256": self.prompt_sha256, "url": self.url,
               "model": self.model_name, "model_sha256": self.model_sha256, "threshold": self.threshold}
        return out | ({"calibration": self.calibration.record()} if self.calibration is not None else {})

    def _one(self, question: str, response: str) -> tuple[float, bool]:
        import openai

        try:
            reply = self.client.chat.completions.create(
                model=self.model_name, messages=[{"role": "user", "content": fenced_prompt(self.prompt, question, response)}],
                max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=TOP_LOGPROBS)
        except openai.APIError as err:
            raise UserError(f"roles.grader: the judge at {self.url} (model {self.model_name}) failed: "
                            f"{type(err).__name__}: {err}; check roles.grader.url, model and api_key_env") from None
        return p_yes_of(reply.choices[0])

    def grade(self, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        """One verdict per (question, response), in order (`concurrency` calls at a time)."""
        if not pairs:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(pairs))) as pool:
            scored = list(pool.map(lambda qr: self._one(*qr), pairs))
        self.parsed += sum(parsed for _, parsed in scored)
        return [Verdict(p, p >= self.threshold, False) for p, _ in scored]

    def calibrate(self, cases: Sequence[tuple[str, str, bool]], *, threshold: float | None = None,
                  min_auroc: float = 0.75, min_balanced_accuracy: float = 0.7):
        """As `LearnedGrader.calibrate`: the audit cases and each wrong one with every injection appended;
        adopts the threshold chosen there and keeps the `JudgeCalibration`."""
        from tracerl.verifiers.calibration import INJECTIONS, calibrate_scores

        cases = list(cases)
        wrong = [(q, r) for q, r, good in cases if not good]
        p = [v.p_yes for v in self.grade([(q, r) for q, r, _ in cases])]
        injected = [v.p_yes for v in self.grade([(q, r + inj) for q, r in wrong for inj in INJECTIONS])]
        cal = calibrate_scores([x for x, (_, _, good) in zip(p, cases) if good],
                               [x for x, (_, _, good) in zip(p, cases) if not good], injected,
                               threshold=threshold, min_auroc=min_auroc, min_balanced_accuracy=min_balanced_accuracy)
        self.calibration, self.threshold = cal, cal.threshold
        self._set_revision()
        return cal

    def verify(self, task: Any, trajectory: Any) -> VerifierResult:
        question = task_field(task, "prompt", "")
        if not isinstance(question, str):
            question = "\n".join(m.get("content", "") for m in question if m.get("role") == "user")
        verdict = self.grade([(question, text_of(trajectory))])[0]
        return VerifierResult({"judge": float(verdict.accept)}, {**verdict.raw(), "reason": "judge"})

    def audit_cases(self) -> list[AuditCase]:
        return list(self._audit)


__all__ = ["RemoteJudge", "fenced_prompt", "p_yes_of"]
