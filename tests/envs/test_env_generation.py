"""The shared difficulty knob and content-hash split of the built-in generators."""

import pytest

from tracerl.envs._generation import levels_for, split_of
from tracerl.errors import UserError


def test_levels_for_by_hand():
    assert levels_for("e", None, 3) == [0, 1, 2, 3]
    assert levels_for("e", 0.5, 2) == [1]  # 0.5 * 2 = level 1
    assert levels_for("e", (0.0, 0.5), 2) == [0, 1]  # levels at 0, 0.5 fall in the range
    assert levels_for("e", (0.4, 0.6), 3) == [2]  # no level at 1/3 or 2/3 inside: nearest to 0.5*3
    assert levels_for("e", [1.0, 1.0], 3) == [3]  # YAML gives lists
    with pytest.raises(UserError, match="out of range"):
        levels_for("e", (0.8, 0.2), 3)


def test_split_is_a_function_of_content_with_a_fifth_held_out():
    keys = [f"task {i}" for i in range(5000)]
    held = [k for k in keys if split_of(k) == "heldout"]
    assert [split_of(k) for k in keys] == [split_of(k) for k in keys]
    assert 0.18 < len(held) / len(keys) < 0.22  # 20% bucket; binomial sd 0.006
