"""Bad requests get OpenAI-style error JSON (message, type, param, code) and the right status, and
nothing an episode recorded is lost or changed."""

import httpx
import openai
import pytest


@pytest.fixture
def episode(gateway, client):
    gw, srv = gateway
    eid = httpx.post(srv.base_url + "/episodes", json={"episode_id": "ep-1"}, timeout=30).json()["episode_id"]
    client.completions.create(model="tiny", prompt="Ann has", max_tokens=3, extra_headers={"X-Episode-Id": eid})
    return eid


def _error(excinfo):
    body = excinfo.value.body
    assert set(body) >= {"message", "type", "param", "code"} and body["type"] == "invalid_request_error"
    assert body["message"].count(";") >= 1  # the problem; the fix
    return body


def test_unknown_model_is_404_naming_the_served_model(client, episode):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"X-Episode-Id": episode})
    body = _error(e)
    assert e.value.status_code == 404 and body["code"] == "model_not_found" and "'tiny'" in body["message"]


@pytest.mark.parametrize("messages, needle", [
    ([{"role": "robot", "content": "hi"}], "messages.0.role"),
    ([{"role": "user"}], "needs content"),
    ([{"role": "tool", "content": "42"}], "tool_call_id"),
    ([], "messages"),
])
def test_malformed_messages_are_400_naming_the_message(client, episode, messages, needle):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=messages, extra_headers={"X-Episode-Id": episode})
    body = _error(e)
    assert e.value.status_code == 400 and needle in body["message"] + str(body["param"])


def test_too_many_tokens_is_400_context_length_exceeded(client, episode):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="Ann has", max_tokens=10_000, extra_headers={"X-Episode-Id": episode})
    body = _error(e)
    assert body["code"] == "context_length_exceeded" and "512" in body["message"] and body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt=[5] * 600, max_tokens=1)
    assert e.value.body["param"] == "messages"


def test_unknown_or_finished_episode(client, gateway, episode):
    gw, srv = gateway
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="tiny", prompt="Ann", max_tokens=2, extra_headers={"X-Episode-Id": "nope"})
    assert _error(e)["code"] == "episode_not_found" and "POST /v1/episodes" in e.value.body["message"]
    r = httpx.post(srv.base_url + "/episodes/nope/finish", json={"reward": 1.0}, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "episode_not_found"
    r = httpx.post(srv.base_url + f"/episodes/{episode}/finish", json={}, timeout=30)
    assert r.status_code == 400 and "reward" in r.json()["error"]["message"]
    r = httpx.post(srv.base_url + "/episodes", json={"episode_id": episode}, timeout=30)
    assert r.status_code == 409 and r.json()["error"]["code"] == "episode_exists"
    r = httpx.post(srv.base_url + f"/episodes/{episode}/finish", json={"task_id": "no-such-task"}, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "task_not_found"


def test_nothing_recorded_is_lost(client, gateway, episode, tmp_path):
    gw, srv = gateway
    before = [c.span_id for c in gw.registry.get(episode).calls]
    for bad in ({"model": "x"}, {"max_tokens": 10_000}, {"n": 17},
                {"extra_body": {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}}):
        kw = {"model": "tiny", "prompt": "Ann", "max_tokens": 2, **bad}
        with pytest.raises(openai.APIStatusError):
            client.completions.create(**kw, extra_headers={"X-Episode-Id": episode})
    r = httpx.post(srv.base_url + "/chat/completions", content=b"{not json", timeout=30,
                   headers={"content-type": "application/json", "x-episode-id": episode})
    assert r.status_code == 400 and "error" in r.json()
    assert [c.span_id for c in gw.registry.get(episode).calls] == before
    out = httpx.post(srv.base_url + f"/episodes/{episode}/finish", json={"reward": 1.0}, timeout=30).json()
    assert out["calls"] == 1 and out["trajectories"] == 1
    with pytest.raises(openai.APIStatusError) as e:  # an ended episode takes no more calls
        client.completions.create(model="tiny", prompt="Ann", max_tokens=2, extra_headers={"X-Episode-Id": episode})
    assert e.value.status_code == 409 and e.value.body["code"] == "episode_finished"
    assert httpx.get(srv.base_url + "/nowhere", timeout=30).json()["error"]["message"].startswith("no route")


def test_serve_with_a_bad_model_path_names_the_flag(tmp_path, capsys):
    """`tracerl serve --model` with a missing directory, or one without config.json: one sentence
    naming `--model` (not the recipe key), exit 2, before any server starts."""
    from tracerl.cli import main

    assert main(["serve", "--model", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "set --model to a local Hugging Face model directory" in err and "model.path" not in err
    assert main(["serve", "--model", str(tmp_path)]) == 2
    assert "point --model at a Hugging Face model directory" in capsys.readouterr().err
