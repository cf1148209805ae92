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


class ScriptedEngine(TorchEngine):
    """Plays fixed turns (text, tokenized on its own) in order, log-prob -0.5 per token; the real tokenizer."""

    def __init__(self, model, tokenizer, turns):
        super().__init__(model, tokenizer)
        self.turns = list(turns)

    def generate(self, prompts, *, max_new_tokens, **kw):
        from tracerl.rollout.engine import Sample

        budgets = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompts)
        out = []
        for b in budgets:
            ids = self.tokenizer(self.turns.pop(0), add_special_tokens=False)["input_ids"][:b]
            out.append(Sample(list(ids), [-0.5] * len(ids), "stop" if len(ids) < b else "length", [0.0] * len(ids)))
        return out


@pytest.fixture
def scripted(tiny, tmp_path):
    """(make(turns) -> (gateway, server, client)); every server it starts is stopped at teardown."""
    import openai

    spec, tasks, model, tok = tiny
    started = []

    def make(turns, **registry_kw):
        registry = EpisodeRegistry(verifier=EnvVerifier(spec, tasks), span_log=tmp_path / "spans.jsonl",
                                   env_name=spec.name, **registry_kw)
        gw = Gateway(ScriptedEngine(model, tok, turns), model_name="tiny", registry=registry,
                     default_max_tokens=64, stop_strings=spec.stop_strings)
        srv = ServerThread(gw, reap_every_s=0.05).start()
        c = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=60)
        started.append((gw, srv, c))
        return gw, srv, c

    yield make
    for gw, srv, c in started:
        c.close()
        srv.stop()
        gw.close()
