"""`POST /v1/weights`: refused unless the server accepts pushes; a body that is not safetensors, or
tensors that do not fit the served model, are refused with one sentence and change nothing."""

import pytest
import torch

from tracerl.rollout.remote_engine import RemoteEngine, RemoteEngineError


def test_a_server_that_does_not_accept_weights_refuses_them(gateway):
    gw, srv = gateway
    eng = RemoteEngine(srv.base_url, "tiny", gw.tokenizer)
    with pytest.raises(RemoteEngineError, match="--accept-weights"):
        eng.load_weights(gw.engine.model.state_dict(), 4)
    assert gw.policy_version == 0
    eng.close()


def test_bad_bodies_and_shapes_are_refused(tiny):
    """(The full table of refused pushes is tests/serve/test_gateway_auth.py.)"""
    import copy

    import httpx

    from tracerl.rollout import TorchEngine
    from tracerl.serve import Gateway
    from tracerl.serve.server import ServerThread

    _, _, model, tok = tiny
    gw = Gateway(TorchEngine(copy.deepcopy(model), tok), model_name="tiny", accept_weights=True, api_keys=("k" * 16,))
    with ServerThread(gw) as srv:
        before = {k: v.clone() for k, v in gw.engine.model.state_dict().items()}
        r = httpx.post(f"{srv.base_url}/weights", params={"version": 2}, content=b"not safetensors",
                       headers={"Authorization": "Bearer " + "k" * 16})
        assert r.status_code == 400 and "safetensors" in r.json()["error"]["message"]
        eng = RemoteEngine(srv.base_url, "tiny", gw.tokenizer, api_key="k" * 16)
        name = next(iter(before))
        with pytest.raises(RemoteEngineError, match="has shape"):
            eng.load_weights({**before, name: torch.zeros(3, 3)}, 2)
        assert gw.policy_version == 0
        assert all(torch.equal(v, gw.engine.model.state_dict()[k]) for k, v in before.items())
        eng.close()
    gw.close()
