"""Agreement of a learned grader with a deterministic verifier on the same outputs.

A false positive is an output the judge accepts that the deterministic verifier rejects (the
judge can be gamed there); a false negative is one it rejects that the verifier accepts.
"""

from __future__ import annotations

from collections.abc import Iterable


def calibration(pairs: Iterable[tuple[bool, bool]]) -> dict[str, float]:
    """`pairs` of (deterministic verdict, judge verdict) → counts and rates (NaN where undefined)."""
    tp = fp = tn = fn = 0
    for truth, judge in pairs:
        if truth and judge:
            tp += 1
        elif truth:
            fn += 1
        elif judge:
            fp += 1
        else:
            tn += 1
    n = tp + fp + tn + fn
    rate = lambda a, b: a / (a + b) if a + b else float("nan")  # noqa: E731
    return {"n": float(n), "agreement": (tp + tn) / n if n else float("nan"),
            "false_positive_rate": rate(fp, tn), "false_negative_rate": rate(fn, tp),
            "judge_accept_rate": (tp + fp) / n if n else float("nan"),
            "verifier_accept_rate": (tp + fn) / n if n else float("nan"),
            "tp": float(tp), "fp": float(fp), "tn": float(tn), "fn": float(fn)}


def calibration_table(rows: dict[str, dict[str, float]]) -> str:
    """One line per slice (e.g. per env or per source) of `calibration` results."""
    head = f"{'slice':<16} {'n':>5} {'agree':>6} {'FP rate':>8} {'FN rate':>8} {'judge acc':>9} {'verif acc':>9}"
    lines = [head]
    for name, c in rows.items():
        lines.append(f"{name:<16} {int(c['n']):>5} {c['agreement']:>6.3f} {c['false_positive_rate']:>8.3f} "
                     f"{c['false_negative_rate']:>8.3f} {c['judge_accept_rate']:>9.3f} {c['verifier_accept_rate']:>9.3f}")
    return "\n".join(lines)
