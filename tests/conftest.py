"""Shared fixtures: a tiny model and tokenizer built once per session, in about a second."""

import random

import pytest


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from tracerl.envs import get_env
    from tracerl.models import build_tiny

    spec = get_env("math_tool")
    tasks = spec.generate("train", 200, 0)
    rng = random.Random(0)
    corpus = [t.prompt for t in tasks] + [spec.expert(t, [], rng, tool_rate=1.0) for t in tasks]
    corpus += ["Use <code> to compute. Give the number in <answer>.", "<output>123</output>"]
    out = tmp_path_factory.mktemp("tiny")
    build_tiny(out, corpus, tags=spec.special_tokens, vocab_size=300, hidden_size=32, num_layers=2,
               num_heads=2, intermediate_size=64, max_positions=256, seed=0)
    return out


@pytest.fixture(scope="session")
def tiny(tiny_dir):
    import torch

    from tracerl.models import load_model_and_tokenizer

    torch.set_num_threads(1)
    return load_model_and_tokenizer(tiny_dir)
