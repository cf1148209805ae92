"""Progress bars only on a terminal: a redirected log holds plain lines, never `\r` frames."""

import io
import os
import subprocess
import sys

from tracerl.config import SFTConfig
from tracerl.contract.roles import TokenRole
from tracerl.telemetry.progress import bars_on
from tracerl.train.sft import train_sft


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_bars_only_when_asked_and_on_a_terminal(tmp_path):
    with open(tmp_path / "log", "w") as f:
        assert not bars_on(True, f)  # a file
    assert bars_on(True, _Terminal()) and not bars_on(False, _Terminal())
    assert not bars_on(True, object())  # a stream without isatty


def test_sft_draws_a_bar_on_a_terminal_and_none_into_a_file(tiny, monkeypatch):
    model, tok = tiny
    ids = tok("<answer>3</answer>")["input_ids"]
    examples = [(ids, [TokenRole.PROMPT] + [TokenRole.ACTION] * (len(ids) - 1))] * 4
    cfg = SFTConfig(epochs=1, batch_size=2)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        for stream, frames in ((_Terminal(), True), (io.StringIO(), False)):  # StringIO: not a terminal
            monkeypatch.setattr(sys, "stderr", stream)
            train_sft(model, tok, examples, cfg, seed=0, log=lambda m, s: None, progress=True)
            assert ("\r" in stream.getvalue()) is frames, stream.getvalue()[:200]
    finally:
        model.load_state_dict(state)


def test_a_redirected_training_log_has_no_carriage_returns(tmp_path):
    """`tracerl train ... > log 2>&1` with bars asked for: per-step lines, no `\r` frames."""
    log = tmp_path / "train.log"
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, "-m", "tracerl.cli", "train", "smoke", f"run.dir={tmp_path / 'run'}",
                               "run.progress=true", "rl.steps=2", "stages=[sft, rl]"],
                              stdout=f, stderr=subprocess.STDOUT, timeout=300, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    text = log.read_bytes()
    assert proc.returncode == 0, text[-2000:]
    assert b"\r" not in text
    assert b"rl step   1/2 |" in text and b"rl step   2/2 |" in text  # the plain lines are there instead
