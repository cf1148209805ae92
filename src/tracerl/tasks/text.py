"""Text normalization, word n-grams and MinHash signatures used by the dedup and decontamination filters.

Normalization lowercases, turns every run of non-alphanumeric characters into one space and splits
on whitespace, so punctuation, case and spacing never decide whether two prompts match.

MinHash (Broder 1997) estimates the Jaccard similarity of two shingle sets; banding the signature
(locality-sensitive hashing) turns "compare every pair" into "compare pairs that share a band".
Departure from the usual pipeline: candidates found by LSH are confirmed with the *exact* Jaccard
of their shingle sets, so the result does not depend on hash luck beyond missing a candidate, and
`near_duplicate_pairs` is pinned to a brute-force reference in the tests.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict

import numpy as np

_NON_WORD = re.compile(r"[^0-9a-z]+")
_PRIME = np.uint64((1 << 31) - 1)  # a, x < 2^31 keeps a·x + b below 2^63: no uint64 overflow


def words(text: str) -> list[str]:
    return _NON_WORD.sub(" ", text.lower()).split()


def normalized(text: str) -> str:
    return " ".join(words(text))


def ngrams(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    """All contiguous n-grams; a text shorter than n yields one shingle holding all of it (if any)."""
    if len(tokens) < n:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def shingle_hash(gram: tuple[str, ...]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(gram).encode(), digest_size=8).digest(), "little")


def jaccard(a: set, b: set) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class MinHasher:
    """Signatures of `num_perm` universal hashes h(x) = (a·x + b) mod (2^31 − 1), min over shingles."""

    def __init__(self, num_perm: int = 64, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, int(_PRIME), size=num_perm, dtype=np.uint64)
        self.b = rng.integers(0, int(_PRIME), size=num_perm, dtype=np.uint64)

    def signature(self, shingles: set[tuple[str, ...]]) -> np.ndarray:
        if not shingles:
            return np.full(self.a.shape, np.iinfo(np.uint64).max, dtype=np.uint64)
        x = np.array([shingle_hash(g) for g in shingles], dtype=np.uint64) % _PRIME
        h = (self.a[:, None] * x[None, :] + self.b[:, None]) % _PRIME
        return h.min(axis=1)


def near_duplicate_pairs(shingle_sets: list[set], threshold: float, *, num_perm: int = 64, bands: int = 16,
                         seed: int = 0) -> list[tuple[int, int, float]]:
    """Pairs (i, j, jaccard) with i < j whose exact shingle Jaccard is ≥ threshold, found via MinHash LSH."""
    hasher = MinHasher(num_perm, seed)
    rows = num_perm // bands
    buckets: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    for i, shingles in enumerate(shingle_sets):
        sig = hasher.signature(shingles)
        for band in range(bands):
            buckets[(band, sig[band * rows:(band + 1) * rows].tobytes())].append(i)
    candidates = {(m[a], m[b]) for m in buckets.values() if len(m) > 1 for a in range(len(m)) for b in range(a + 1, len(m))}
    pairs = []
    for i, j in sorted(candidates):
        sim = jaccard(shingle_sets[i], shingle_sets[j])
        if sim >= threshold:
            pairs.append((i, j, sim))
    return pairs
