"""When a row stops: a stop token id, or a stop string that the row's decoded tail ends in.

Every engine that decides stops itself (torch, HF generate) uses this one rule, so a stop string
that spans several tokens ends a row at the same token everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class StopRules:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._cache: dict[tuple[str, ...], set[int] | None] = {}

    def single_token_stops(self, stop_strings: tuple[str, ...]) -> set[int] | None:
        """Token ids of stop strings that are whole tokens; None when some stop spans tokens."""
        if stop_strings not in self._cache:
            vocab = self.tokenizer.get_vocab()
            ids = {vocab[s] for s in stop_strings if s in vocab}
            self._cache[stop_strings] = ids if len(ids) == len(stop_strings) else None
        return self._cache[stop_strings]

    def rule(self, stop_strings: Sequence[str], stop_token_ids: Sequence[int]) -> Callable[[list[int], int], bool]:
        """A function (row's ids so far, new token) -> whether the row stops."""
        stop_ids = set(stop_token_ids)
        single = self.single_token_stops(tuple(stop_strings))
        if single is not None:
            stop_ids |= single
        multi = tuple(stop_strings) if single is None else ()

        def stops(ids: list[int], t: int) -> bool:
            return t in stop_ids or bool(multi and self.ends_with_stop(ids, multi))
        return stops

    def ends_with_stop(self, ids: list[int], stop_strings: Sequence[str]) -> bool:
        tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=False)
        return any(s in tail for s in stop_strings)


def row_budgets(max_new_tokens: int | Sequence[int], rows: int) -> list[int]:
    """`max_new_tokens` as one budget per row (an engine's `generate` takes an int or one per row)."""
    return [int(max_new_tokens)] * rows if isinstance(max_new_tokens, int) else [int(b) for b in max_new_tokens]
