"""Procedural knowledge bases of fictional people, companies and cities, and questions over them.

Every task carries its own small knowledge base (a handful of one-sentence passages), so no answer
can be memorised from pre-training or from other tasks: the only way to answer is to search. Names
come from fixed pools of made-up words (40 people, 16 companies, 16 cities) so that a tiny
tokenizer can keep each name whole and a tiny model only has to copy one token; who was born where
and works for whom is drawn afresh for every task.
"""

from __future__ import annotations

import random
import re
import string

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
LEVELS = (0, 1, 2)  # 0: one hop; 1: two hops; 2: two hops over a larger, more confusable base
_SIZES = {0: (4, 2, 3), 1: (4, 2, 3), 2: (7, 3, 4)}  # people, companies, cities


def _pool(n: int, suffix: str, salt: str) -> tuple[str, ...]:
    rng, out = random.Random(f"search_qa-names:{salt}"), []
    while len(out) < n:
        name = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(2)) + suffix
        if name not in out:
            out.append(name)
    return tuple(out)


PEOPLE = _pool(40, "", "people")
COMPANIES = _pool(16, "tek", "companies")
CITIES = _pool(16, "ton", "cities")


def make_kb(rng: random.Random, level: int) -> dict:
    """People have a birthplace and an employer; companies have a home city."""
    n_people, n_companies, n_cities = _SIZES[level]
    people = rng.sample(PEOPLE, n_people)
    companies = rng.sample(COMPANIES, n_companies)
    cities = rng.sample(CITIES, n_cities)
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
                    "type": "cities", "queries": [person]}
        return {"question": f"where does {person} work?", "answer": kb["works"][person],
                "type": "companies", "queries": [person]}
    company = kb["works"][person]
    return {"question": f"where is the employer of {person} based?", "answer": kb["based"][company],
            "type": "cities", "queries": [person, company]}


_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """SQuAD-style normalization: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


