"""A tiny model (built in seconds, untrained) behind a real gateway on 127.0.0.1 (a free port), and
the `openai` client pointed at it. The server starts and stops with the fixture."""

import random

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("openai")

from tracerl.envs import get_env  # noqa: E402
from tracerl.models import build_tiny, load_model_and_tokenizer  # noqa: E402
from tracerl.rollout import TorchEngine  # noqa: E402
from tracerl.serve import EnvVerifier, EpisodeRegistry, Gateway  # noqa: E402
from tracerl.serve.server import ServerThread  # noqa: E402


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    spec = get_env("calc_json")
    tasks = spec.generate("train", 24, 0)
    env, texts = spec.make(), []
    for t in tasks:
        texts += [m["content"] for m in env.reset(t, 0)]
        texts.append(spec.expert(t, [], random.Random(0), tool_rate=1.0))
        texts.append(f"<tool_response>{t.answer}</tool_response><answer>{t.answer}</answer>")
    path = build_tiny(tmp_path_factory.mktemp("tiny") / "m", texts, tags=spec.special_tokens, vocab_size=300,
                      hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=512, seed=0)
    model, tok = load_model_and_tokenizer(path)
    return spec, tasks, model, tok


@pytest.fixture
def gateway(tiny, tmp_path):
    spec, tasks, model, tok = tiny
    registry = EpisodeRegistry(verifier=EnvVerifier(spec, tasks), idle_timeout_s=600.0,
                               span_log=tmp_path / "spans.jsonl", env_name=spec.name)
    gw = Gateway(TorchEngine(model, tok), model_name="tiny", registry=registry, default_max_tokens=24,
                 stop_strings=spec.stop_strings)
    with ServerThread(gw) as srv:
        yield gw, srv
    gw.close()


@pytest.fixture
def client(gateway):
    import openai

    _, srv = gateway
    with openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=60) as c:
        yield c
