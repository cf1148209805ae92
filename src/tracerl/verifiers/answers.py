"""Answer verifiers: normalized exact match and numeric match with tolerance.

Both grade only the single `<answer>` block (see extract.py) and record why an output was refused.
The numeric parser is strict on purpose: `nan`, `inf`, overflowing or absurdly long numbers,
and several numbers in one answer are refused, not coerced.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from tracerl.verifiers.base import AuditCase, VerifierResult, rejected, task_field, text_of
from tracerl.verifiers.extract import extract_answer

_LATEX_WRAPPERS = re.compile(r"^\\(?:boxed|text|mathrm|textbf)\{(.*)\}$", re.DOTALL)
_NUMBER = re.compile(r"""^([+-])?(?:(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d*))?|\.(\d+))(?:[eE]([+-]?\d{1,4}))?$""")
_FRACTION = re.compile(r"^([+-]?\d+)\s*/\s*([+-]?\d+)$")
_LATEX_FRAC = re.compile(r"^([+-])?\\[dt]?frac\{\s*([+-]?\d+)\s*\}\{\s*([+-]?\d+)\s*\}$")
MAX_DIGITS = 40


def normalize_text(value: str, *, case_sensitive: bool = False) -> str:
    """Strip `$…$`, `\\boxed{}`/`\\text{}` wrappers, surrounding whitespace and a final period;
    collapse inner whitespace; lowercase unless `case_sensitive`."""
    s = value.strip()
    for _ in range(3):
        s = s.strip().rstrip(".").strip().strip("$").strip()
        m = _LATEX_WRAPPERS.match(s)
        if m:
            s = m.group(1)
    s = re.sub(r"\s+", " ", s).strip().rstrip(".").strip()
    return s if case_sensitive else s.lower()


def parse_number(value: str) -> tuple[Fraction | None, str]:
    """A finite rational from a plain number, `a/b`, `\\frac{a}{b}`, with optional `%`; else a reason."""
    s = normalize_text(value, case_sensitive=True).replace("\\!", "").replace("{,}", ",")
    if s.lower().lstrip("+-") in ("nan", "inf", "infinity", "\\infty", "∞"):
        return None, f"{value!r} is not a finite number"
    percent = s.endswith("%") or s.endswith("\\%")
    if percent:
        s = s[:-2] if s.endswith("\\%") else s[:-1]
    if sum(ch.isdigit() for ch in s) > MAX_DIGITS:
        return None, f"{value!r} has more than {MAX_DIGITS} digits"
    m = _NUMBER.match(s)
    if m:
        sign, whole, frac, only_frac, exp = m.groups()
        digits = (whole or "0").replace(",", "") + "." + (frac or only_frac or "0")
        number = Fraction(digits)
        if exp:
            if abs(int(exp)) > 400:
                return None, f"{value!r} has an exponent beyond ±400"
            number *= Fraction(10) ** int(exp)
        number = -number if sign == "-" else number
    else:
        m = _FRACTION.match(s) or _LATEX_FRAC.match(s)
        if not m:
            return None, f"{value!r} is not a single number"
        groups = m.groups()
        sign = groups[0] if len(groups) == 3 else ""
        num, den = int(groups[-2]), int(groups[-1])
        if den == 0:
            return None, f"{value!r} divides by zero"
        number = Fraction(num, den) * (-1 if sign == "-" else 1)
    return (number / 100 if percent else number), ""


def numbers_match(got: Fraction, ref: Fraction, rel_tol: float, abs_tol: float = 0.0) -> tuple[bool, Fraction]:
    """(equal, the tolerance used). Two integers compare exactly, whatever their size or spelling
    (`1234568.0` is not `1234567`). Otherwise |got - ref| <= max(abs_tol, rel_tol·|ref|), and when
    either side is an integer the window is also held under 1/2, so no tolerance can accept a
    different integer (`1234567.5` is not `1234567`)."""
    if got.denominator == 1 and ref.denominator == 1:
        return got == ref, Fraction(0)
    tol = max(Fraction(abs_tol), Fraction(rel_tol) * abs(ref))
    diff = abs(got - ref)
    if got.denominator == 1 or ref.denominator == 1:
        return diff <= tol and diff < Fraction(1, 2), min(tol, Fraction(1, 2))
    return diff <= tol, tol


def written_exactly(value: str) -> bool:
    """True for a number written without a decimal point or exponent (`12`, `3/4`, `\\frac{1}{3}`):
    an exact value, which an approximation such as `0.333333333333` does not equal."""
    s = normalize_text(value, case_sensitive=True)
    return "." not in s and not re.search(r"\d[eE]", s)


class ExactMatch:
    """1 when the normalized answer equals the normalized reference (task field `answer`, or a
    list of accepted answers)."""

    name, revision = "exact_match", "1"
    components, primary = ("correct", "format"), "correct"

    def __init__(self, *, case_sensitive: bool = False) -> None:
        self.case_sensitive = case_sensitive

    def verify(self, task: Any, trajectory: Any) -> VerifierResult:
        got = extract_answer(text_of(trajectory))
        if not got.ok:
            return rejected(self.components, got.reason)
        refs = task_field(task, "answer")
        refs = refs if isinstance(refs, (list, tuple)) else [refs]
        norm = normalize_text(got.value, case_sensitive=self.case_sensitive)
        accepted = {normalize_text(str(r), case_sensitive=self.case_sensitive) for r in refs}
        correct = norm in accepted
        return VerifierResult({"correct": float(correct), "format": 1.0},
                              {"answer": got.value, "normalized": norm,
                               "reason": "" if correct else f"{norm!r} is not one of the accepted answers"})

    def audit_cases(self) -> list[AuditCase]:
        t = {"answer": "Paris"}
        return [
            AuditCase("good", t, "<answer>Paris</answer>", True),
            AuditCase("good-normalized", t, "<answer> $\\text{paris}$. </answer>", True),
            AuditCase("outside-tags", t, "The answer is Paris.", False, "answer given outside the tags"),
            AuditCase("hedge", t, "<answer>London</answer><answer>Paris</answer>", False, "two answers, one right"),
            AuditCase("list-hedge", t, "<answer>Paris, London, Rome</answer>", False, "every candidate in one answer"),
            AuditCase("tag-in-prompt-echo", t, "<answer>Paris", False, "unclosed tag"),
            AuditCase("empty", t, "<answer></answer>", False, "empty answer"),
        ]


class NumericMatch:
    """1 when the answer is one finite number equal to the reference (see `numbers_match`: two
    integers exactly, else |got - ref| <= max(abs_tol, rel_tol * |ref|), under 1/2 when either side
    is an integer). Refuses nan, inf, and |got| > max_abs."""

    name, revision = "numeric", "2"  # 2: integers exactly; no tolerance reaches a different integer
    components, primary = ("correct", "format"), "correct"

    def __init__(self, *, rel_tol: float = 1e-6, abs_tol: float = 1e-9, max_abs: float = 1e15) -> None:
        self.rel_tol, self.abs_tol, self.max_abs = rel_tol, abs_tol, max_abs

    def verify(self, task: Any, trajectory: Any) -> VerifierResult:
        got = extract_answer(text_of(trajectory))
        if not got.ok:
            return rejected(self.components, got.reason)
        number, why = parse_number(got.value)
        if number is None:
            return rejected(self.components, why, answer=got.value)
        if abs(number) > self.max_abs:
            return rejected(self.components, f"{got.value!r} is larger than {self.max_abs:g} in magnitude",
                            answer=got.value)
        ref, ref_why = parse_number(str(task_field(task, "answer")))
        if ref is None:
            raise ValueError(f"task reference answer is not a number: {ref_why}")
        correct, tol_q = numbers_match(number, ref, self.rel_tol, self.abs_tol)
        diff, tol = abs(float(number - ref)), float(tol_q)
        return VerifierResult({"correct": float(correct), "format": 1.0},
                              {"answer": got.value, "value": float(number), "reference": float(ref),
                               "abs_diff": diff, "tolerance": tol,
                               "reason": "" if correct else f"off by {diff:g} (tolerance {tol:g})"})

    def audit_cases(self) -> list[AuditCase]:
        t = {"answer": "1234.5"}
        return [
            AuditCase("good", t, "<answer>1234.5</answer>", True),
            AuditCase("good-commas", t, "<answer>1,234.50</answer>", True),
            AuditCase("good-fraction", t, "<answer>2469/2</answer>", True),
            AuditCase("nan", t, "<answer>nan</answer>", False, "NaN compares false with everything"),
            AuditCase("inf", t, "<answer>inf</answer>", False, "infinity overflows a tolerance test"),
            AuditCase("neg-inf", t, "<answer>-Infinity</answer>", False, "negative infinity"),
            AuditCase("huge", t, "<answer>1e308</answer>", False, "a huge number to overflow relative tolerance"),
            AuditCase("overflow", t, "<answer>1e999</answer>", False, "overflows float parsing to inf"),
            AuditCase("many-digits", t, "<answer>" + "9" * 500 + "</answer>", False, "a 500-digit number"),
            AuditCase("two-numbers", t, "<answer>1234.5 or 1234</answer>", False, "two numbers in one answer"),
            AuditCase("outside-tags", t, "1234.5", False, "answer outside the tags"),
            AuditCase("expression", t, "<answer>__import__('os')</answer>", False, "code instead of a number"),
        ]
