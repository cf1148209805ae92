"""Filters over the training pool; each discard is a ledger record with its filter and reason.

Filters judge training tasks only: held-out tasks pass through untouched (their membership is fixed
when they are created, docs/architecture.md, "Tasks and environments"), though they may serve as an evaluation set for decontamination.
Order: malformed → too short → exact duplicate → near duplicate → contaminated → all-pass → all-fail,
so a task is recorded once, under the first filter that removes it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tracerl.contract.task import Task
from tracerl.config.tasks import FilterConfig
from tracerl.tasks.profile import DifficultyProfile
from tracerl.tasks.text import near_duplicate_pairs, ngrams, normalized, shingle_hash, words

log = logging.getLogger("tracerl.tasks")


@dataclasses.dataclass(frozen=True)
class Discard:
    """Why one task left the pool."""

    task_id: str
    source: str
    filter: str
    reason: str
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)


class Ledger:
    """Every discarded task with its reason, in the order the filters ran."""

    def __init__(self, records: Iterable[Discard] = ()):
        self.records: list[Discard] = list(records)

    def extend(self, records: Iterable[Discard]) -> None:
        self.records.extend(records)

    def __len__(self) -> int:
        return len(self.records)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records:
            out[r.filter] = out.get(r.filter, 0) + 1
        return out

    def by_filter(self, name: str) -> list[Discard]:
        return [r for r in self.records if r.filter == name]

    def write_jsonl(self, path: str | Path) -> None:
        with open(path, "w") as f:
            for r in self.records:
                f.write(json.dumps(dataclasses.asdict(r), sort_keys=True, default=str) + "\n")

    @classmethod
    def read_jsonl(cls, path: str | Path) -> "Ledger":
        return cls(Discard(**json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip())


Result = tuple[list[Task], list[Discard]]


def _drop(t: Task, name: str, reason: str, **detail: Any) -> Discard:
    return Discard(t.id, t.source, name, reason, detail)


def _damage(text: str) -> str | None:
    if "\ufffd" in text:
        return "holds U+FFFD replacement characters (text decoded with the wrong encoding)"
    for ch in text:
        if unicodedata.category(ch) == "Cc" and ch not in "\n\t\r":
            return f"holds control character {ch!r}"
    return None


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | dict | tuple) and len(value) == 0) or (
        isinstance(value, str) and not value.strip())


def filter_malformed(tasks: list[Task], answer_pattern: str | None = None) -> Result:
    """Tasks that passed the schema but cannot be posed or graded."""
    pattern = re.compile(answer_pattern) if answer_pattern else None
    kept, out = [], []
    for t in tasks:
        text = t.prompt_text()
        reason = None
        if not text.strip():
            reason = "prompt is empty"
        elif _empty(t.answer) and _empty(t.tests):
            reason = "answer and tests are both empty: nothing can grade it"
        elif (damage := _damage(text)) is not None:
            reason = f"prompt {damage}"
        elif pattern is not None and t.answer is not None and not pattern.fullmatch(str(t.answer)):
            reason = f"answer {str(t.answer)[:40]!r} does not match the pattern {answer_pattern!r}"
        if reason is None:
            kept.append(t)
        else:
            out.append(_drop(t, "malformed", reason))
    return kept, out


def filter_too_short(tasks: list[Task], min_words: int) -> Result:
    kept, out = [], []
    for t in tasks:
        n = len(words(t.prompt_text()))
        if n < min_words:
            out.append(_drop(t, "too_short", f"prompt has {n} words, fewer than {min_words}", words=n))
        else:
            kept.append(t)
    return kept, out


def filter_exact_duplicates(tasks: list[Task]) -> Result:
    """Keeps the first task of each normalized prompt; notes when the duplicate's answer disagrees."""
    first: dict[str, Task] = {}
    kept, out = [], []
    for t in tasks:
        key = normalized(t.prompt_text())
        if key in first:
            orig = first[key]
            clash = "" if orig.answer == t.answer else "; its answer differs, so one label is likely wrong"
            out.append(_drop(t, "exact_duplicate", f"same prompt as task {orig.id!r}{clash}", duplicate_of=orig.id))
        else:
            first[key] = t
            kept.append(t)
    return kept, out


def filter_near_duplicates(tasks: list[Task], threshold: float = 0.8, ngram: int = 5, *, num_perm: int = 64,
                           bands: int = 16) -> Result:
    """Drops a task whose shingle Jaccard with an earlier kept task reaches `threshold`."""
    sets = [ngrams(words(t.prompt_text()), ngram) for t in tasks]
    partners: dict[int, list[tuple[int, float]]] = {}
    for i, j, sim in near_duplicate_pairs(sets, threshold, num_perm=num_perm, bands=bands):
        partners.setdefault(j, []).append((i, sim))
    dropped: set[int] = set()
    kept, out = [], []
    for j, t in enumerate(tasks):
        match = next(((i, s) for i, s in partners.get(j, []) if i not in dropped), None)
        if match is None:
            kept.append(t)
        else:
            i, sim = match
            dropped.add(j)
            out.append(_drop(t, "near_duplicate", f"{ngram}-gram Jaccard {sim:.2f} with task {tasks[i].id!r}",
                             duplicate_of=tasks[i].id, jaccard=round(sim, 4)))
    return kept, out


def filter_contaminated(tasks: list[Task], eval_sets: Mapping[str, list[tuple[str, str]]], n: int = 9) -> Result:
    """Drops a task sharing any word n-gram with an evaluation item (AceReason's 9-gram rule).

    `eval_sets` maps a set name to (item id, text) pairs. A text shorter than n words is one n-gram
    of its own, so short items match only when the normalized texts are equal.
    """
    index: dict[int, tuple[str, str]] = {}
    for set_name, items in eval_sets.items():
        for item_id, text in items:
            for g in ngrams(words(text), n):
                index.setdefault(shingle_hash(g), (set_name, item_id))
    kept, out = [], []
    for t in tasks:
        hit = None
        for g in sorted(ngrams(words(t.prompt_text()), n)):
            if (where := index.get(shingle_hash(g))) is not None:
                hit = (g, where)
                break
        if hit is None:
            kept.append(t)
        else:
            (g, (set_name, item_id)) = hit
            out.append(_drop(t, "contaminated", f"shares the {len(g)}-gram {' '.join(g)!r} with {set_name} item {item_id!r}",
                             eval_set=set_name, eval_id=item_id, ngram=" ".join(g)))
    return kept, out


def filter_all_pass(tasks: list[Task], profile: DifficultyProfile, threshold: float = 1.0, min_attempts: int = 1) -> Result:
    kept, out = [], []
    for t in tasks:
        e = profile.get(t.id)
        if e is not None and e.attempts >= min_attempts and e.pass_rate >= threshold:
            out.append(_drop(t, "all_pass", f"solved {e.successes} of {e.attempts} attempts (pass rate ≥ {threshold:g})",
                             successes=e.successes, attempts=e.attempts))
        else:
            kept.append(t)
    return kept, out


def filter_all_fail(tasks: list[Task], profile: DifficultyProfile, min_attempts: int = 1) -> Result:
    kept, out = [], []
    for t in tasks:
        e = profile.get(t.id)
        if e is not None and e.attempts >= min_attempts and e.successes == 0:
            out.append(_drop(t, "all_fail", f"solved 0 of {e.attempts} attempts", successes=0, attempts=e.attempts))
        else:
            kept.append(t)
    return kept, out


@dataclasses.dataclass
class FilterResult:
    kept: list[Task]
    ledger: Ledger


def apply_filters(tasks: list[Task], cfg: FilterConfig, *, profile: DifficultyProfile | None = None,
                  eval_sets: Mapping[str, list[tuple[str, str]]] | None = None) -> FilterResult:
    """Run the configured filters over the training tasks; held-out tasks are kept as they are."""
    train = [t for t in tasks if t.split == "train"]
    heldout = [t for t in tasks if t.split != "train"]
    eval_sets = dict(eval_sets or {})
    if cfg.decontaminate_against_heldout and heldout:
        eval_sets["heldout"] = [(t.id, t.prompt_text()) for t in heldout]
    if (cfg.all_pass or cfg.all_fail) and profile is None:
        from tracerl.errors import UserError

        raise UserError("the all_pass/all_fail filters need a difficulty profile; run `tracerl tasks profile` "
                        "and set profile.path, or turn those filters off")
    steps: list[tuple[bool, str, Any]] = [
        (cfg.malformed, "malformed", lambda ts: filter_malformed(ts, cfg.answer_pattern)),
        (cfg.min_prompt_words > 0, "too_short", lambda ts: filter_too_short(ts, cfg.min_prompt_words)),
        (cfg.exact_duplicates, "exact_duplicate", filter_exact_duplicates),
        (cfg.near_duplicates, "near_duplicate", lambda ts: filter_near_duplicates(
            ts, cfg.near_duplicate_threshold, cfg.near_duplicate_ngram, num_perm=cfg.minhash_permutations,
            bands=cfg.minhash_bands)),
        (bool(eval_sets), "contaminated", lambda ts: filter_contaminated(ts, eval_sets, cfg.contamination_ngram)),
        (cfg.all_pass, "all_pass", lambda ts: filter_all_pass(ts, profile, cfg.all_pass_threshold, cfg.min_attempts)),
        (cfg.all_fail, "all_fail", lambda ts: filter_all_fail(ts, profile, cfg.min_attempts)),
    ]
    ledger = Ledger()
    for enabled, name, fn in steps:
        if not enabled:
            continue
        before = len(train)
        train, discards = fn(train)
        ledger.extend(discards)
        log.info("filter %s removed %d of %d training tasks", name, len(discards), before)
    keep_ids = {id(t) for t in train}
    kept = [t for t in tasks if id(t) in keep_ids or t.split != "train"]
    return FilterResult(kept, ledger)
