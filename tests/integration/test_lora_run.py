"""`tracerl train smoke model.lora.r=4` end to end: adapter-only checkpoints, a resume that ends on the
same adapter as the uninterrupted run, and `tracerl merge` on the result. Slow (three smoke runs)."""

import json

import pytest
import torch

pytest.importorskip("peft")

from tracerl.cli import main  # noqa: E402

pytestmark = pytest.mark.slow
LORA = ["model.lora.r=4", "rl.checkpoint_every=1", "run.threads=1", "rl.algorithm.kl.coef=0.05"]


def test_lora_smoke_run_resumes_exactly_and_merges(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    straight, cut = tmp_path / "straight", tmp_path / "cut"
    assert main(["train", "smoke", f"run.dir={straight}", "rl.steps=2", *LORA]) == 0
    assert main(["train", "smoke", f"run.dir={cut}", "rl.steps=1", *LORA]) == 0
    assert main(["train", "--resume", str(cut), "rl.steps=2"]) == 0
    a = load_file(straight / "checkpoints/step_2/adapter_model.safetensors")
    b = load_file(cut / "checkpoints/step_2/adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ckpt = straight / "checkpoints/step_2"
    assert not (ckpt / "model.safetensors").exists() and not (ckpt / "reference.safetensors").exists()
    assert json.loads((ckpt / "lora_base.json").read_text())["path"] == "../lora_base"
    assert main(["merge", str(ckpt), "--out", str(tmp_path / "merged")]) == 0
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "merged", local_files_only=True) is not None
