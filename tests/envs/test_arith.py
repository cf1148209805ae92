"""`arith`: the answer rule worked by hand, held-out sums disjoint from training, one-turn episodes."""

import pytest

from tracerl.contract.roles import TerminalReason
from tracerl.envs import get_env
from tracerl.envs.arith import extract, score


@pytest.mark.parametrize("reply,answer", [
    ("5 + 7 = 12", "12"),
    ("5 + 7 equals 12.", "12"),
    ("2 + 16 = 18\n\nSo your answer actually equals 2", "18"),  # the first statement of the result counts
    ("The answer is 12", "12"),                                  # no "=": the last integer
    ("I cannot say.", None),
])
def test_extract(reply, answer):
    assert extract(reply) == answer


def test_score_components():
    assert score("5 + 7 = 12", "12") == {"correct": 1.0, "format": 1.0}
    assert score("5 + 7 = 13", "12") == {"correct": 0.0, "format": 0.0}
    long = "To add 5 and 7 we count up from five, one step at a time, until we reach the sum = 12"
    assert score(long, "12") == {"correct": 1.0, "format": 0.0}  # 19 words > 12


def test_splits_are_disjoint_deterministic_and_one_turn():
    spec = get_env("arith")
    train, held = spec.generate("train", 500, 0, (0.0, 0.4)), spec.generate("heldout", 500, 0, (0.0, 0.4))
    # operands 1..11 (difficulty 0.4 → 5 + round(6) = 11): 121 pairs. (7a + b) mod 6 == 0 means
    # b ≡ −a (mod 6): for a = 6, b = 6 only (1 value); for the other 10 values of a, 2 values of b → 21
    assert len(train) + len(held) == 121 and len(held) == 21
    assert not {t.id for t in train} & {t.id for t in held}
    assert [t.id for t in spec.generate("train", 5, 0, (0.0, 0.4))] == [t.id for t in train[:5]]
    env = spec.make()
    msgs = env.reset(held[0], seed=0)
    assert msgs[1]["content"] == held[0].prompt
    step = env.step(f"= {held[0].answer}")
    assert step.terminated and step.terminal_reason == TerminalReason.EOS and step.reward_components["correct"] == 1.0
