"""The tiny model's tokenizer: digit runs merged by BPE, or one token per digit (`model.tiny.individual_digits`)."""

import pytest

from tracerl.config import load_recipe
from tracerl.models.tiny import build_tokenizer
from tracerl.run import pipeline

CORPUS = ["Ann has 23 apples. <answer>81</answer>", "<tool_response>81</tool_response> 23 + 81"] * 20


def _pieces(tok, text):
    return [tok.decode([i]) for i in tok(text, add_special_tokens=False)["input_ids"]]


def test_bpe_merges_a_frequent_number_into_one_token():
    tok = build_tokenizer(CORPUS, vocab_size=300, tags=["<answer>", "</answer>"])
    assert _pieces(tok, "<answer>81</answer>") == ["<answer>", "81", "</answer>"]


def test_individual_digits_gives_one_token_per_digit_and_round_trips():
    tok = build_tokenizer(CORPUS, vocab_size=300, tags=["<answer>", "</answer>"], individual_digits=True)
    assert _pieces(tok, "<answer>81</answer>") == ["<answer>", "8", "1", "</answer>"]
    assert _pieces(tok, "x 2023") == ["x", " ", "2", "0", "2", "3"]
    ids = tok("Ann has 23 apples.", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == "Ann has 23 apples."


class _Built(Exception):
    pass


@pytest.mark.parametrize("value", [True, False])
def test_the_recipe_key_reaches_the_tokenizer(tmp_path, monkeypatch, value):
    seen = {}

    def fake_build_tiny(out_dir, corpus, **kw):
        seen.update(kw)
        raise _Built

    monkeypatch.setattr(pipeline, "build_tiny", fake_build_tiny)
    # run_recipe sets the process's torch threads from the recipe; later tests compare float results
    # against single-threaded worker processes, so the thread count must not leak out of this test
    monkeypatch.setattr(pipeline.torch, "set_num_threads", lambda n: None)
    recipe = load_recipe("smoke", [f"run.dir={tmp_path / 'run'}", f"model.tiny.individual_digits={str(value).lower()}"])
    with pytest.raises(_Built):
        pipeline.run_recipe(recipe)
    assert seen["individual_digits"] is value
