"""Pulling the graded part out of the policy's text. Only what is inside the tags counts.

Rules that close common loopholes: exactly one `<answer>` block (a hedge with two answers gets
nothing), no answer outside the tags, nested or unclosed tags are malformed, and an oversized
answer is refused before any parser sees it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_ANSWER_CHARS = 2000

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FENCE = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL)
_CODE_TAG = re.compile(r"<code>(.*?)</code>", re.DOTALL)


@dataclass(frozen=True)
class Extraction:
    """The extracted text (None when nothing acceptable was found) and why."""

    value: str | None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.value is not None


def extract_answer(text: str, max_chars: int = MAX_ANSWER_CHARS) -> Extraction:
    """The content of the single `<answer>...</answer>` block, stripped."""
    opens, closes = text.count("<answer>"), text.count("</answer>")
    if opens == 0 and closes == 0:
        return Extraction(None, "no <answer> tag: answers outside the tags are not graded")
    if opens != closes:
        return Extraction(None, f"malformed answer tags ({opens} opening, {closes} closing)")
    found = _ANSWER.findall(text)
    if len(found) != 1:
        return Extraction(None, f"{len(found)} <answer> blocks: exactly one is graded, a hedge gets nothing")
    value = found[0].strip()
    if "<answer>" in value:
        return Extraction(None, "nested <answer> tags")
    if not value:
        return Extraction(None, "empty <answer> block")
    if len(value) > max_chars:
        return Extraction(None, f"answer is {len(value)} characters, more than {max_chars}")
    return Extraction(value)


def extract_code(text: str, max_chars: int = 100_000) -> Extraction:
    """The program: the last ```python fenced block, else the last <code> block."""
    blocks = _FENCE.findall(text) or _CODE_TAG.findall(text)
    if not blocks:
        return Extraction(None, "no ```python block or <code> block with the program")
    code = blocks[-1].strip("\n")
    if not code.strip():
        return Extraction(None, "the code block is empty")
    if len(code) > max_chars:
        return Extraction(None, f"program is {len(code)} characters, more than {max_chars}")
    return Extraction(code)
