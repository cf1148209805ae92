"""`tracerl train smoke` where a copy of the policy outside the learner's module samples it: LoRA, autocast and
engine choice combine with rl.mode async (spawned worker processes) and with each other (the HF engine on a copy).
Each run is the two-step smoke recipe (the tiny model, LoRA attached after its SFT)."""

import json

import pytest

from tracerl.cli import main


@pytest.mark.timeout(240)
@pytest.mark.parametrize("extra", [
    ["model.lora.r=8", "rl.mode=async"],
    ["rl.mode=async", "model.autocast=bf16"],
    ["engine.name=hf", "model.lora.r=8"],
    ["engine.name=hf", "rl.mode=async"],
    ["engine.name=hf", "model.autocast=bf16", "model.lora.r=8", "rl.mode=async"],
], ids=lambda e: " ".join(e))
def test_a_copy_of_the_policy_samples_it_in_every_combination(tmp_path, extra):
    pytest.importorskip("peft") if any("lora" in e for e in extra) else None
    run = tmp_path / "run"
    assert main(["train", "smoke", f"run.dir={run}", "run.threads=1", *extra]) == 0
    ckpt = run / "checkpoints" / "step_2"
    lora = any("lora" in e for e in extra)
    assert (ckpt / ("adapter_model.safetensors" if lora else "model.safetensors")).is_file()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in rows if r.get("stage") == "rl" and "reward/mean" in r][-1:] == [2]
