"""`model.path` resolution: a hub model id is found in the local Hugging Face cache, never downloaded;
a GGUF-loaded model is detached from its quantizer so it saves in plain Hugging Face format."""

import types

import pytest

from tracerl.errors import UserError
from tracerl.models.load import plain_module, resolve_model_path


def _fake_cache(root, model_id="acme/tiny-chat"):
    repo = root / ("models--" + model_id.replace("/", "--"))
    snap = repo / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    return snap


def test_model_id_in_the_local_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants as c

    snap = _fake_cache(tmp_path)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model_path("acme/tiny-chat") == snap
    with pytest.raises(UserError, match="neither a local directory nor a model in the local Hugging Face cache"):
        resolve_model_path("acme/not-here")


def test_a_local_directory_wins_and_plain_paths_are_untouched(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acme" / "tiny-chat").mkdir(parents=True)
    assert resolve_model_path("acme/tiny-chat") == (tmp_path / "acme" / "tiny-chat").relative_to(tmp_path)
    assert str(resolve_model_path("/no/such/dir/x")) == "/no/such/dir/x"  # three parts: not an id, left to the loader


def test_plain_module_drops_the_quantizer():
    config = types.SimpleNamespace(quantization_config={"quant_method": "gguf"})
    model = types.SimpleNamespace(hf_quantizer=object(), config=config, is_quantized=True)
    plain_module(model)
    assert model.hf_quantizer is None and not hasattr(config, "quantization_config") and model.is_quantized is False
