"""Procedural knowledge bases of fictional people, companies and cities, and questions over them.

Every task carries its own small knowledge base (a handful of one-sentence passages), so no answer
can be memorised from pre-training or from other tasks: the only way to answer is to search.
"""

from __future__ import annotations

import random
import re
import string

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
LEVELS = (0, 1, 2)  # 0: one hop; 1: two hops; 2: two hops over a larger, more confusable base
_SIZES = {0: (4, 2, 3), 1: (4, 2, 3), 2: (7, 3, 4)}  # people, companies, cities


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(syllables))


def _names(rng: random.Random, n: int, suffix: str, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        name = _word(rng, 2) + suffix
        if name not in taken:
            taken.add(name)
            out.append(name)
    return out


def make_kb(rng: random.Random, level: int) -> dict:
    """People have a birthplace and an employer; companies have a home city."""
    n_people, n_companies, n_cities = _SIZES[level]
    taken: set[str] = set()
    people = _names(rng, n_people, "", taken)
    companies = _names(rng, n_companies, "tek", taken)
    cities = _names(rng, n_cities, "ton", taken)
    born = {p: rng.choice(cities) for p in people}
    works = {p: rng.choice(companies) for p in people}
    based = {c: rng.choice(cities) for c in companies}
    return {"people": people, "companies": companies, "cities": cities,
            "born": born, "works": works, "based": based}


def passages(kb: dict) -> list[str]:
    out = [f"{p} was born in {kb['born'][p]} and works at {kb['works'][p]}." for p in kb["people"]]
    out += [f"{c} is based in {kb['based'][c]}." for c in kb["companies"]]
    return out


def make_question(rng: random.Random, kb: dict, level: int) -> dict:
    """Returns the question, its answer, the entity type of the answer and the expert's queries."""
    person = rng.choice(kb["people"])
    if level == 0:
        if rng.random() < 0.5:
            return {"question": f"where was {person} born?", "answer": kb["born"][person],
                    "type": "cities", "queries": [f"{person} born"]}
        return {"question": f"where does {person} work?", "answer": kb["works"][person],
                "type": "companies", "queries": [f"{person} works"]}
    company = kb["works"][person]
    return {"question": f"where is the employer of {person} based?", "answer": kb["based"][company],
            "type": "cities", "queries": [f"{person} works", f"{company} based"]}


_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """SQuAD-style normalization: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


