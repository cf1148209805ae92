"""Engine-consistency probe: hand-checked calculator, and the real engine against the learner."""

import math

import pytest
import torch

from tracerl.telemetry.probe import consistency_metrics, run_probe


def test_consistency_metrics_by_hand():
    # greedy: 3 of 4 positions agree → 0.75; log-prob |diffs| 0.1, 0.0, 0.3 → mean 0.4/3, max 0.3
    m = consistency_metrics([[5, 6], [7, 8]], [[5, 6], [7, 9]], [[-1.0, -2.0], [-0.5]], [[-1.1, -2.0], [-0.2]])
    assert m["probe/token_agreement"] == pytest.approx(0.75)
    assert m["probe/logprob_absdiff_mean"] == pytest.approx(0.4 / 3)
    assert m["probe/logprob_absdiff_max"] == pytest.approx(0.3)
    assert m["probe/greedy_tokens"] == 4 and m["probe/sampled_tokens"] == 3


def test_torch_engine_matches_learner_forward(tiny):
    from tracerl.rollout import TorchEngine

    model, tok = tiny
    engine = TorchEngine(model, tok)
    # prefixes of different lengths exercise the engine's left padding against the learner's right padding
    prefixes = [tok("Ann has 3 apples.")["input_ids"], tok("What is 12 + 7?")["input_ids"][:3]]
    m = run_probe(engine, model, prefixes, max_new_tokens=6, temperature=1.0, seed=1)
    assert m["probe/greedy_tokens"] > 0 and m["probe/sampled_tokens"] > 0
    assert m["probe/token_agreement"] == 1.0
    assert m["probe/logprob_absdiff_max"] < 1e-4


def test_a_drifted_engine_is_caught(tiny):
    from tracerl.rollout import TorchEngine

    model, tok = tiny
    drifted = type(model)(model.config)
    drifted.load_state_dict(model.state_dict())
    with torch.no_grad():  # a weight sync that only half happened
        drifted.lm_head.weight.mul_(1.5)
    drifted.eval()
    m = run_probe(TorchEngine(drifted, tok), model, [tok("Ann has 3 apples.")["input_ids"]], max_new_tokens=6)
    assert m["probe/logprob_absdiff_max"] > 1e-2 and math.isfinite(m["probe/logprob_absdiff_mean"])
