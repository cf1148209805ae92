"""The speed benchmarks compare like with like: the `generate` engine of benchmarks/rollout.py
decodes what the tracerl engine decodes (greedy: the same argmax tokens, stops and budgets), and
benchmarks/vs_trl.py's summary is the arithmetic its docstring states."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT))
    return mod


def test_hf_generate_engine_decodes_what_the_tracerl_engine_decodes(tiny):
    from tracerl.rollout import TorchEngine

    bench = _load("rollout")
    model, tok = tiny
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ["Ann has 3 apples.", "7", "Bo has 12 coins."]]
    stop = ("</code>", "</answer>")
    kw = dict(max_new_tokens=[5, 9, 7], temperature=0.0, stop_strings=stop, stop_token_ids=[tok.eos_token_id])
    ours = TorchEngine(model, tok).generate(prompts, **kw)
    theirs = bench.HFGenerateEngine(model, tok).generate(prompts, **kw)
    assert [s.token_ids for s in theirs] == [s.token_ids for s in ours]
    assert [s.finish for s in theirs] == [s.finish for s in ours]


def test_vs_trl_summary_by_hand():
    bench = _load("vs_trl")
    runs = {"tracerl": [{"step_s": [9.0, 2.0, 4.0], "reward": [0.5, 0.25]}],
            "trl": [{"step_s": [20.0, 6.0, 6.0], "reward": [0.25, 0.25]}]}
    s = bench.summarise(runs, episodes=64)
    # step 1 is dropped: tracerl median(2, 4) = 3 s, TRL 6 s -> TRL takes 2x as long
    assert s["tracerl"]["step_s"] == 3.0 and s["trl"]["step_s"] == 6.0 and "trl_step_over_this" not in s["trl"]
    assert s["tracerl"]["trl_step_over_this"] == pytest.approx(2.0)
    # reward per second: mean reward x episodes / step: 0.375 x 64 / 3 = 8.0; TRL 0.25 x 64 / 6 = 2.667 -> 3x
    assert s["tracerl"]["reward_per_s"] == pytest.approx(8.0)
    assert s["tracerl"]["reward_per_s_over_trl"] == pytest.approx(3.0)


def test_vs_trl_real_arm_flags_and_ratios_by_hand():
    bench = _load("vs_trl_real")
    assert bench.arm_overrides("tracerl") == []
    assert bench.arm_overrides("tracerl_bf16e_fused_packed") == [
        "model.autocast=bf16", "engine.dtype=bfloat16", "learner.optimizer=adamw_fused", "engine.prepack=true"]
    with pytest.raises(SystemExit, match="unknown flag '_fast'"):
        bench.arm_overrides("tracerl_fast")

    def rep(step, rss):  # one repetition: 3 steps, the first (warm-up) dropped
        return {"step_s": [99.0, step, step], "rollout_s": [9.0, step / 2, step / 2], "learner_s": [9.0, step / 2, step / 2],
                "tokens": [1, 100, 100], "peak_rss_mb": rss}

    runs = {"tracerl": [rep(8.0, 3000), rep(10.0, 3000)], "tracerl_bf16e": [rep(5.0, 3300), rep(6.0, 3300)],
            "trl": [rep(12.0, 3000), rep(12.0, 3000)], "trl_bf16": [rep(15.0, 3000), rep(15.0, 3000)]}
    s = bench.summarise(runs)
    assert s["trl_over_tracerl_step_s"] == pytest.approx((12 / 8 + 12 / 10) / 2)  # median of two ratios: their mean
    assert s["trl_over_tracerl_bf16e_step_s"] == pytest.approx((12 / 5 + 12 / 6) / 2)
    assert s["trl_over_tracerl_bf16e_vs_trl_bf16_step_s"] == pytest.approx((15 / 5 + 15 / 6) / 2)
    assert s["rss_tracerl_over_trl_bf16e"] == pytest.approx(1.1)
    assert "trl_over_tracerl_keep_step_s" not in s  # no trl_keep arm ran


def test_lean_decode_bench_times_each_decode_step_of_both_engines(tiny):
    # benchmarks/lean_decode.py: a session's decode steps timed from one sampling call to the next, the samples
    # returned; both engines over one model sample the same tokens (tests/rollout/test_lean_decode.py: bit for bit)
    import copy

    from tracerl.rollout import TorchEngine

    bench = _load("lean_decode")
    model, tok = copy.deepcopy(tiny[0]).eval(), tiny[1]
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12]]
    ms_lean, lean = bench.timed_session(TorchEngine(model, tok, lean_decode=True), prompts, 8)
    ms_hf, hf = bench.timed_session(TorchEngine(model, tok, lean_decode=False), prompts, 8)
    assert ms_lean > 0 and ms_hf > 0
    assert [s.token_ids for s in lean] == [s.token_ids for s in hf] and all(len(s.token_ids) == 8 for s in lean)
    assert [s.logprobs for s in lean] == [s.logprobs for s in hf]
