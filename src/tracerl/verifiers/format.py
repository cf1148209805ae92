"""Format checks: the response follows the action grammar, whatever its content.

`format` is 1 when every known tag is balanced and not nested in itself, there is exactly one
`<answer>` block, nothing but whitespace follows it (a second guess after the answer is a hedge),
and the response is within `max_chars`.
"""

from __future__ import annotations

import re
from typing import Any

from tracerl.verifiers.base import AuditCase, VerifierResult, rejected, text_of
from tracerl.verifiers.extract import extract_answer


class FormatCheck:
    name, revision = "format", "1"
    components, primary = ("format",), "format"

    def __init__(self, *, tags: tuple[str, ...] = ("think", "code", "answer"), max_chars: int = 20_000,
                 require_answer: bool = True) -> None:
        self.tags, self.max_chars, self.require_answer = tags, max_chars, require_answer

    def verify(self, task: Any, trajectory: Any) -> VerifierResult:
        text = text_of(trajectory)
        if len(text) > self.max_chars:
            return rejected(self.components, f"response is {len(text)} characters, more than {self.max_chars}")
        for tag in self.tags:
            depth = 0
            for m in re.finditer(rf"<(/?){tag}>", text):
                depth += -1 if m.group(1) else 1
                if depth not in (0, 1):
                    return rejected(self.components, f"<{tag}> is nested or closed before it opens")
            if depth:
                return rejected(self.components, f"<{tag}> is not closed")
        if self.require_answer:
            got = extract_answer(text)
            if not got.ok:
                return rejected(self.components, got.reason)
            tail = text[text.rindex("</answer>") + len("</answer>"):]
            if tail.strip():
                return rejected(self.components, "text after </answer>: the answer must be the last thing")
        return VerifierResult({"format": 1.0}, {"reason": ""})

    def audit_cases(self) -> list[AuditCase]:
        return [
            AuditCase("good", {}, "<think>2+2</think>\n<answer>4</answer>", True),
            AuditCase("good-with-code", {}, "<code>print(2+2)</code>\n<answer>4</answer>\n", True),
            AuditCase("no-answer", {}, "The answer is 4.", False, "answer outside the tags"),
            AuditCase("two-answers", {}, "<answer>4</answer><answer>5</answer>", False, "two answers"),
            AuditCase("trailing-guess", {}, "<answer>4</answer> or maybe 5", False, "a second guess after the answer"),
            AuditCase("unclosed-think", {}, "<think>hmm <answer>4</answer>", False, "unbalanced tags"),
            AuditCase("nested-answer", {}, "<answer><answer>4</answer></answer>", False, "nested answer tags"),
            AuditCase("too-long", {}, "<think>" + "a" * 30_000 + "</think><answer>4</answer>", False, "length padding"),
        ]
