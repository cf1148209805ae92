"""avg@n, pass@k (against the closed form), maj@k and protocol separation, by hand."""

import json
from math import comb

import pytest

from tracerl.eval.aggregate import Sample, aggregate, maj_at, pass_at
from tracerl.eval.protocol import Protocol, read_results, write_results
from tracerl.eval.record import metric_names, protocol_tags


def s(correct, answer=None, tools=0, errors=0):
    return Sample(correct=correct, answer=answer, tool_calls=tools, tool_errors=errors)


TASKS = {
    # task a: 4 samples, 1 correct; task b: 4 samples, 3 correct
    "a": [s(False, "3"), s(True, "4", tools=1), s(False, "3", tools=2, errors=1), s(False, None)],
    "b": [s(True, "7"), s(True, "7"), s(False, "8"), s(True, "7", tools=1)],
}


def closed_form(n, c, k):
    return 1 - comb(n - c, k) / comb(n, k)


def test_pass_at_k_matches_closed_form():
    # k=1: a 1/4, b 3/4 → 0.5. k=2: a 1 − C(3,2)/C(4,2) = 1 − 3/6 = 0.5; b 1 − C(1,2)/6 = 1 → 0.75
    assert pass_at(TASKS, 1) == pytest.approx(0.5)
    assert pass_at(TASKS, 2) == pytest.approx(0.75)
    for k in (1, 2, 3, 4):
        assert pass_at(TASKS, k) == pytest.approx((closed_form(4, 1, k) + closed_form(4, 3, k)) / 2)
    assert pass_at(TASKS, 5) != pass_at(TASKS, 5)  # NaN: fewer than k samples


def test_maj_at_k_chunks():
    # k=2, task a chunks [3✗, 4✓] tie → first seen "3" ✗; [3✗, None] → "3" ✗ → 0
    #       task b chunks [7✓, 7✓] → ✓; [8✗, 7✓] tie → "8" ✗ → 0.5;  mean 0.25
    assert maj_at(TASKS, 2) == pytest.approx(0.25)
    # k=4, a: votes 3×2, 4×1 → "3" ✗; b: 7×3 → ✓ → 0.5
    assert maj_at(TASKS, 4) == pytest.approx(0.5)


def test_aggregate_names_and_tool_stats():
    out = aggregate(TASKS, [1, 2, 8])
    # avg@4 = (1/4 + 3/4) / 2 = 0.5; k=8 > n is not reported
    assert out["avg@4"] == pytest.approx(0.5) and "pass@8" not in out
    # maj@1: each sample votes alone, so it scores its own correctness (a sample with no answer scores 0):
    # a [✗, ✓, ✗, none] = 1/4, b [✓, ✓, ✗, ✓] = 3/4 → 0.5, equal to avg@4 here
    assert out["pass@1"] == pytest.approx(0.5) and out["maj@1"] == pytest.approx(0.5)
    # tools: 4 calls over 8 episodes = 0.5; 1 error / 4 calls = 0.25; 3 of 8 episodes used a tool
    assert out["tool_calls_per_episode"] == pytest.approx(0.5)
    assert out["tool_error_rate"] == pytest.approx(0.25)
    assert out["tool_use_rate"] == pytest.approx(3 / 8)
    # with tool: a✓(1 call), a✗(2 calls), b✓ → 2/3; without: a✗, a✗(None), b✓, b✓, b✗ → 2/5
    assert out["success_with_tool"] == pytest.approx(2 / 3)
    assert out["success_without_tool"] == pytest.approx(2 / 5)


def proto(**kw):
    base = dict(checkpoint_sha256="c" * 64, tokenizer_sha256="t" * 64, chat_template_sha256="h" * 64,
                env_name="math_tool", env_revision="r1", verifier_revision="v1", tasks_sha256="x" * 64,
                num_tasks=2, sampling={"temperature": 1.0}, budgets={"max_turns": 4}, n=4, ks=[1, 2])
    return Protocol(**(base | kw))


def test_protocol_columns_and_results_files(tmp_path):
    p1, p2 = proto(), proto(checkpoint_sha256="d" * 64)
    p3 = proto(sampling={"temperature": 0.6})
    assert p1.column == p2.column and p1.sha256 != p2.sha256  # same procedure, different models
    assert p1.column != p3.column  # a different temperature is a different column
    # the column is recorded beside the numbers (the eval/protocol tag), never inside a metric name
    assert not hasattr(p1, "metric_names")
    assert metric_names({"pass@1": 0.5}) == {"eval/pass@1": 0.5} and protocol_tags(p1) == {"eval/protocol": p1.column}
    d1 = write_results(tmp_path, p1, aggregate(TASKS, [1, 2]), TASKS)
    write_results(tmp_path, p3, {"pass@1": 0.1})
    rec = json.loads((d1 / "protocol.json").read_text())
    assert rec["sha256"] == p1.sha256 and rec["sampling"] == {"temperature": 1.0}
    assert len((d1 / "per_task.jsonl").read_text().splitlines()) == 2
    found = read_results(tmp_path)
    assert sorted(f["protocol"]["column"] for f in found) == sorted([p1.column, p3.column])
