"""Entropy by action type (reasoning / tool call / answer) and answer/program diversity by hand."""

import pytest

from tracerl.contract import TerminalReason, TokenRole, Trajectory, ids_sha256, validate
from tracerl.telemetry import step_metrics
from tracerl.telemetry.exploration import span_classifier, tag_classifier

VOCAB = {0: "Q:", 1: "Let", 2: " me", 3: "<code>", 4: "x=1", 5: "</code>", 6: "<answer>", 7: "4", 8: "</answer>",
         9: "<co", 10: "de>pr", 11: "int(", 12: "5"}
pieces = tag_classifier(lambda ids: [VOCAB[i] for i in ids])


def one_turn(tid, group, action_ids, answer=None):
    t = Trajectory(trajectory_id=tid, group_id=group, task_id="t", env_name="toy")
    t.append([0], TokenRole.PROMPT)
    s, e = t.append(action_ids, TokenRole.ACTION, logprobs=[-1.0] * len(action_ids), policy_version=0)
    t.add_span("action", s, e, sampled_ids_sha256=ids_sha256(action_ids))
    t.set_reward({"correct": 1.0}, {"correct": 1.0})
    t.verifier_output = {} if answer is None else {"extracted_answer": answer}
    t.finish(TerminalReason.EOS)
    return validate(t)


def test_tag_classifier_labels_tokens_inside_tags():
    t = one_turn("a", "g", [1, 2, 3, 4, 5, 6, 7, 8])
    assert pieces(t) == ["reasoning", "reasoning", "tool_call", "tool_call", "tool_call", "answer", "answer", "answer"]
    # a tag split across tokens ("<co" + "de>pr") and left open by truncation still marks a tool call
    t = one_turn("b", "g", [1, 9, 10, 11])
    assert pieces(t) == ["reasoning", "tool_call", "tool_call", "tool_call"]


def test_stratified_entropy_by_hand():
    t = one_turn("a", "g", [1, 2, 3, 4, 5, 6, 7, 8])
    entropy = [[1.0, 3.0, 0.5, 0.5, 0.5, 0.1, 0.1, 0.1]]
    m = step_metrics([t], token_entropy=entropy, classify=pieces)
    # all 8 tokens: (1 + 3 + 3·0.5 + 3·0.1) / 8 = 5.8 / 8 = 0.725
    assert m["policy/entropy"] == pytest.approx(0.725)
    # reasoning (1 + 3) / 2 = 2; tool call 1.5 / 3 = 0.5; answer 0.3 / 3 = 0.1
    assert m["policy/entropy_reasoning"] == pytest.approx(2.0)
    assert m["policy/entropy_tool_call"] == pytest.approx(0.5)
    assert m["policy/entropy_answer"] == pytest.approx(0.1)
    assert m["policy/token_frac_tool_call"] == pytest.approx(3 / 8)


def test_recorded_spans_classify_by_default():
    t = one_turn("a", "g", [1, 2, 6, 7, 8])
    t.add_span("answer", 3, 6, parent_span_id=0)  # tokens 3..5 are <answer>4</answer>
    assert span_classifier(t) == ["reasoning", "reasoning", "answer", "answer", "answer"]
    m = step_metrics([t], token_entropy=[[2.0, 2.0, 0.2, 0.2, 0.2]])
    # answer (3·0.2)/3 = 0.2; reasoning 2.0; no tool-call tokens → no tool-call stratum
    assert m["policy/entropy_answer"] == pytest.approx(0.2)
    assert m["policy/entropy_reasoning"] == pytest.approx(2.0)
    assert "policy/entropy_tool_call" not in m


def test_distinct_answers_per_group():
    trajs = [one_turn("a", "g1", [7], "4"), one_turn("b", "g1", [7], "4"), one_turn("c", "g1", [12], "5"),
             one_turn("d", "g2", [7], "1"), one_turn("e", "g2", [7], "1")]
    # g1 answers {4, 5} → 2, g2 {1} → 1: mean 1.5
    assert step_metrics(trajs)["groups/distinct_answers"] == pytest.approx(1.5)
    # without a verifier answer the answer-tagged token ids are compared: (7) vs (12) → 2 distinct in g
    tagged = [one_turn("x", "g", [6, 7, 8]), one_turn("y", "g", [6, 12, 8]), one_turn("z", "g", [6, 7, 8])]
    assert step_metrics(tagged, classify=pieces)["groups/distinct_answers"] == pytest.approx(2.0)
