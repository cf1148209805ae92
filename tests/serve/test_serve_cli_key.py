"""`tracerl serve --api-key KEY --accept-weights --max-body-bytes N`, the command a user types, in a
subprocess: it prints where it listens, refuses a call without the key and a body over the cap, and
serves one with the key; `TRACERL_API_KEY` works the same."""

import os
import re
import subprocess
import sys

import httpx
import pytest


@pytest.fixture
def model_dir(tiny, tmp_path):
    _, _, model, tok = tiny
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    return tmp_path / "m"


@pytest.mark.parametrize("via_env", [False, True])
def test_serve_with_a_key_from_the_command_line(model_dir, via_env):
    key = "sk-cli-test-0123456789"
    args = [sys.executable, "-m", "tracerl.cli", "serve", "--model", str(model_dir), "--port", "0", "--threads", "1",
            "--accept-weights", "--max-body-bytes", "4096", "--max-tokens", "2"]
    env = {**os.environ, "TRACERL_API_KEY": key} if via_env else {k: v for k, v in os.environ.items()
                                                                  if k != "TRACERL_API_KEY"}
    proc = subprocess.Popen(args + ([] if via_env else ["--api-key", key]), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = ""
        for line in proc.stdout:
            if "tracerl serve: model" in line:
                break
        url = re.search(r"at (http://\S+/v1)", line).group(1)
        assert "1 API key(s)" in line
        assert httpx.get(url + "/models", timeout=30).status_code == 401
        auth = {"Authorization": f"Bearer {key}"}
        name = httpx.get(url + "/models", headers=auth, timeout=30).json()["data"][0]["id"]
        big = {"model": name, "prompt": "x" * 5000}
        assert httpx.post(url + "/completions", json=big, headers=auth, timeout=30).status_code == 413
        r = httpx.post(url + "/completions", json={"model": name, "prompt": "Ann has"}, headers=auth, timeout=60)
        assert r.status_code == 200 and r.json()["choices"][0]["token_ids"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
