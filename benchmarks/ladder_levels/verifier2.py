"""An independent second verifier for math_tool held-out episodes: it shares no code with the
environment's verifier (`math_tool.answer`) or its task generator. It re-derives the expected number
from the problem's English text with its own reader, reads the policy's last closed `<answer>` from the
decoded completion with its own pattern, and compares them."""

from __future__ import annotations

import re

_HAS = re.compile(r"(\w+) has (\d+) (\w+)\.")
_STEP = re.compile(r"(?:gets (\d+) bags of (\d+)\.|gets (\d+) more\.|gives away (\d+)\.|are multiplied by (\d+)\.)")
_ASK = re.compile(r"How many \w+ does \w+ have\?")
_ANSWER = re.compile(r"<answer>\s*(-?[0-9]+)\s*</answer>")


def solve(problem: str) -> int | None:
    """The number the word problem asks for, or None when the text is not one this reader knows."""
    head = _HAS.search(problem)
    if head is None or not _ASK.search(problem):
        return None
    value = int(head.group(2))
    for m in _STEP.finditer(problem, head.end()):
        bags, size, more, away, times = m.groups()
        if bags is not None:
            value += int(bags) * int(size)
        elif more is not None:
            value += int(more)
        elif away is not None:
            value -= int(away)
        else:
            value *= int(times)
    return value


def final_answer(completion: str) -> int | None:
    """The integer of the last closed <answer>...</answer> the policy wrote (tool output never holds one)."""
    found = _ANSWER.findall(completion)
    return int(found[-1]) if found else None


def rescore(problem: str, completion: str, terminal_reason: str) -> float | None:
    """1.0 / 0.0, or None when the problem text cannot be read (counted apart, never as agreement).
    An episode cut off (not ended by the policy) scores 0 whatever it wrote."""
    want = solve(problem)
    if want is None:
        return None
    if terminal_reason in ("max_tokens", "max_turns", "wall_timeout", "infra_failure", "safety_stop"):
        return 0.0
    got = final_answer(completion)
    return 1.0 if got is not None and got == want else 0.0


def problem_of(prompt_text: str) -> str:
    """The user turn of a decoded math_tool prompt (the last user message)."""
    tail = prompt_text.rsplit("user\n", 1)[-1]
    return tail.split("<|im_end|>", 1)[0]


def audit(run_dir, stage_prefix: str = "eval") -> dict[str, float]:
    """Re-score every stored episode of the run's LAST held-out evaluation with this verifier.
    Returns success by each verifier (avg over episodes), their disagreement rate, and unread problems."""
    from tracerl.store.export import records
    from tracerl.store.rundir import RunDir

    recs = list(records(RunDir(run_dir), stage=stage_prefix))
    if not recs:
        return {"episodes": 0}
    last_step = max(r["step"] for r in recs)
    stage = [r["stage"] for r in recs if r["step"] == last_step][-1]
    recs = [r for r in recs if r["stage"] == stage and r["step"] == last_step]
    ours, theirs, unread = [], [], 0
    for r in recs:
        s = rescore(problem_of(r["prompt_text"]), r["completion_text"], str(r.get("terminal_reason")))
        if s is None:
            unread += 1
            continue
        ours.append(s)
        theirs.append(float((r.get("reward_components") or {}).get("correct", 0.0)))
    n = max(1, len(ours))
    return {"episodes": len(recs), "unread": unread, "env_success": sum(theirs) / n, "v2_success": sum(ours) / n,
            "disagreement": sum(a != b for a, b in zip(ours, theirs)) / n}
