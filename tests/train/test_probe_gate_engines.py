"""The engine probe runs before RL and after every weight sync of an engine with its own weights, and
a deliberately perturbed rollout engine trips `gates.probe_logprob_diff_max`: the run stops with the
gate event in the store, the probe numbers in metrics.jsonl and a checkpoint at the tripping step."""

import copy
import json

import pytest

from tracerl.config import load_recipe
from tracerl.rollout import TorchEngine
from tracerl.store import RunDir, Store
from tracerl.tasks import UniformSampler
from tracerl.telemetry import GateTripped
from tracerl.run.pipeline import run_recipe
from tracerl.run.rl_loop import train_rl

LIMIT = 1e-3  # float32 engine vs float32 learner agree to ~1e-5; a bfloat16 copy or a temperature slip do not


def _recipe(run_dir, *extra):
    return load_recipe("smoke", [f"run.dir={run_dir}", "env.name=parity", "stages=[sft, rl]", "sft.epochs=2",
                                 "rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=2", "env.max_new_tokens=8",
                                 "rl.minibatches=1", "rl.truncation=keep", "rl.checkpoint_every=0",
                                 "rl.algorithm.kl.coef=0", "engine.name=hf", f"gates.probe_logprob_diff_max={LIMIT}",
                                 "run.threads=1",
                                 *extra])


def _probe_steps(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["probe/logprob_absdiff_max"] for r in rows if "probe/logprob_absdiff_max" in r}


def test_an_engine_copy_in_bfloat16_trips_the_probe_gate_end_to_end(tmp_path, parity_env):
    run_dir = tmp_path / "run"
    with pytest.raises(GateTripped) as trip:
        run_recipe(_recipe(run_dir, "engine.dtype=bfloat16"))
    assert trip.value.trip.gate == "probe_logprob_diff_max" and trip.value.trip.step == 1
    assert trip.value.trip.value > LIMIT
    (event,) = RunDir(run_dir).store.events("gate")
    assert event["payload"]["gate"] == "probe_logprob_diff_max" and event["step"] == 1
    assert _probe_steps(run_dir)[1] == pytest.approx(trip.value.trip.value)
    assert (run_dir / "checkpoints" / "step_1" / "trainer_state.json").exists()


def test_a_float32_copy_passes_and_is_probed_after_every_sync(tmp_path, parity_env):
    run_dir = tmp_path / "run"
    run_recipe(_recipe(run_dir))  # completes: no trip
    probes = _probe_steps(run_dir)
    # probe_every is 10, so step 2's probe is the after-sync one of an engine that holds its own weights
    assert sorted(probes) == [1, 2] and max(probes.values()) < LIMIT
    assert RunDir(run_dir).store.events("gate") == []


def test_the_drivers_engine_copy_follows_every_async_update(tmp_path):
    """rl.mode=async: the workers sample, but the driver's engine (held-out evaluation, the probe) holds a copy of
    its own under engine.name=hf; each publish syncs it too, so the probe after step 2 still agrees with the
    learner (a copy left at version 0 would score step 2's policy with step 0's weights)."""
    run_dir = tmp_path / "run"
    run_recipe(load_recipe("smoke", [f"run.dir={run_dir}", "rl.mode=async", "engine.name=hf", "run.threads=1",
                                     f"gates.probe_logprob_diff_max={LIMIT}", "gates.probe_every=1"]))
    probes = _probe_steps(run_dir)
    assert sorted(probes) == [1, 2] and max(probes.values()) < LIMIT


class _SlippedEngine(TorchEngine):
    """The torch engine with a temperature slip of +0.3 in the engine only (the learner scores at T)."""

    def generate(self, prompts, *, temperature=1.0, **kw):
        return super().generate(prompts, temperature=temperature + 0.3 if temperature else 0.0, **kw)


def test_a_temperature_slip_in_the_engine_trips_the_gate_before_rl_goes_on(tiny, parity_env, tmp_path):
    model, tok = tiny
    model = copy.deepcopy(model)
    recipe = load_recipe("smoke", ["rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=2", "env.max_new_tokens=6",
                                   "rl.truncation=keep", "rl.checkpoint_every=0", "rl.algorithm.kl.coef=0",
                                   f"gates.probe_logprob_diff_max={LIMIT}"])
    saved = []
    with Store(tmp_path / "s.sqlite") as store, pytest.raises(GateTripped) as trip:
        train_rl(model, tok, _SlippedEngine(model, tok), UniformSampler(parity_env.generate("train", 8, 0), seed=3),
                 recipe, spec=parity_env, log=lambda m, s: None, on_eval=None,
                 on_checkpoint=lambda s, st: saved.append(s), store=store, tokenizer_hashes={}, progress=False)
    assert trip.value.trip.gate == "probe_logprob_diff_max" and trip.value.trip.step == 1 and saved == [1]
    assert trip.value.trip.value > LIMIT
    with Store(tmp_path / "s.sqlite") as store:
        assert [e["payload"]["gate"] for e in store.events("gate")] == ["probe_logprob_diff_max"]
