"""One failing fixture per contract rule; each must raise ContractError naming that rule."""

import math

import pytest

from tracerl.contract import RULES, ContractError, TerminalReason, TokenRole, validate
from tracerl.contract.trajectory import Span


def test_valid_trajectory_passes(traj):
    assert validate(traj) is traj
    # reward = 1.0 * 1.0 + 0.1 * 1.0
    assert traj.reward == pytest.approx(1.1)


def _break_lengths(t):
    t.behavior_logprobs.pop()


def _break_role_values(t):
    t.roles[0] = 9


def _break_pad_trailing(t):
    t.roles[0] = TokenRole.PAD


def _break_action_logprobs_positive(t):
    t.behavior_logprobs[3] = 0.5


def _break_action_logprobs_on_observation(t):
    t.behavior_logprobs[5] = -0.1


def _break_action_versions(t):
    t.policy_versions[4] = -1


def _break_span_bounds(t):
    t.spans[1] = Span(span_id=1, kind="observation", start=4, end=7)  # covers an action token


def _break_action_provenance_retokenized(t):
    t.token_ids[3] = 99  # an action token that the engine did not sample


def _break_action_provenance_unrecorded(t):
    del t.spans[0]  # action tokens outside any recorded action span


def _break_reward_sum(t):
    t.reward = 2.0


def _break_reward_nonfinite(t):
    t.reward_components["correct"] = math.inf


def _break_terminal_reason(t):
    t.terminal_reason = None


def _break_truncation(t):
    t.terminal_reason = TerminalReason.MAX_TOKENS  # truncated flag left False


def _break_infra_failure(t):
    t.terminal_reason = TerminalReason.INFRA_FAILURE


CASES = [
    ("lengths", _break_lengths),
    ("role_values", _break_role_values),
    ("pad_trailing", _break_pad_trailing),
    ("action_logprobs", _break_action_logprobs_positive),
    ("action_logprobs", _break_action_logprobs_on_observation),
    ("action_versions", _break_action_versions),
    ("span_bounds", _break_span_bounds),
    ("action_provenance", _break_action_provenance_retokenized),
    ("action_provenance", _break_action_provenance_unrecorded),
    ("reward", _break_reward_sum),
    ("reward", _break_reward_nonfinite),
    ("terminal_reason", _break_terminal_reason),
    ("truncation", _break_truncation),
    ("infra_failure", _break_infra_failure),
]


@pytest.mark.parametrize("rule,breaker", CASES, ids=[f"{r}-{b.__name__}" for r, b in CASES])
def test_each_rule_catches_its_violation(traj, rule, breaker):
    breaker(traj)
    with pytest.raises(ContractError) as err:
        validate(traj)
    assert err.value.rule == rule
    assert err.value.trajectory_id == "t0"
    assert rule in str(err.value)


def test_every_rule_has_a_failing_fixture():
    assert {rule for rule, _ in CASES} == set(RULES)


def test_error_names_position(traj):
    traj.behavior_logprobs[5] = -0.1  # position 5 is an observation token
    with pytest.raises(ContractError) as err:
        validate(traj)
    assert err.value.position == 5


def test_truncated_episode_is_valid_when_flagged(traj):
    traj.finish(TerminalReason.MAX_TURNS)
    assert traj.truncated
    validate(traj)
