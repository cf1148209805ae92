"""Every mode combines with every other: a pairwise covering array of 1-2 step runs of the tiny model.

Factors: rollout mode {sync, async η=1} × environments {one, a two-environment mixture} × parameters
{full, LoRA} × learner ranks {1, 2} × backend {local, ray} × algorithm {grpo, ppo, prime, mopd} × engine
{torch, hf}. `ROWS` holds 8 runs in which every pair of settings of any two factors appears at least
once (`test_rows_cover_every_pair` checks that). Each run must finish, store only trajectories that
pass the contract's validation, take optimizer steps, and show the mechanism each of its settings
adds (staleness metrics, per-domain metrics, adapter checkpoints, the Ray manifest, the critic's /
PRM's / teachers' metrics, the hf engine's own weight copy).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")
pytest.importorskip("ray")

FACTORS = {
    "algo": ["grpo", "ppo", "prime", "mopd"],
    "mode": ["sync", "async"],
    "envs": ["one", "two"],
    "params": ["full", "lora"],
    "ranks": [1, 2],
    "backend": ["local", "ray"],
    "engine": ["torch", "hf"],
}
# (algo, mode, envs, params, ranks, backend, engine) as level indices: each algorithm twice, the second
# row the complement of the first in every two-level factor.
ROWS = [(0, 0, 0, 0, 0, 0, 0), (0, 1, 1, 1, 1, 1, 1), (1, 0, 0, 0, 0, 1, 1), (1, 1, 1, 1, 1, 0, 0),
        (2, 0, 0, 1, 1, 0, 0), (2, 1, 1, 0, 0, 1, 1), (3, 0, 1, 0, 1, 0, 1), (3, 1, 0, 1, 0, 1, 0)]
HERE = Path(__file__).parent
TWO_ENV = HERE / "combos_two_env.yaml"
SMALL = ["rl.steps=2", "eval.tasks=4", "eval.samples=1", "eval.k=[1]", "stages=[sft,rl]", "run.threads=1",
         "rl.eval_every=0", "rl.checkpoint_every=1"]


def settings(row) -> dict:
    return {name: FACTORS[name][i] for name, i in zip(FACTORS, row)}


def test_rows_cover_every_pair():
    names = list(FACTORS)
    for a, b in itertools.combinations(range(len(names)), 2):
        need = set(itertools.product(range(len(FACTORS[names[a]])), range(len(FACTORS[names[b]]))))
        assert need <= {(r[a], r[b]) for r in ROWS}, (names[a], names[b])


def _train(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracerl.cli", "train", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    """An SFT-only run of each recipe shape: its policy is the MOPD teacher (same tokenizer as the student)."""
    out = {}
    for kind, recipe in (("one", "smoke"), ("two", str(TWO_ENV))):
        d = tmp_path_factory.mktemp(f"teacher_{kind}")
        r = _train([recipe, f"run.dir={d}", *SMALL, "stages=[sft]"])
        assert r.returncode == 0, r.stderr[-3000:]
        out[kind] = d / "checkpoints" / "step_0"
    return out


def overrides(s: dict, teachers: dict) -> list[str]:
    # an entropy bonus (mopd: its distillation term) moves every row, so each run takes optimizer steps
    # whatever the tiny model's sparse rewards
    out = [f"rl.algorithm.name={s['algo']}", f"learner.ranks={s['ranks']}", f"run.backend={s['backend']}",
           f"engine.name={s['engine']}"] + (["rl.algorithm.entropy.coef=0.01"] if s["algo"] != "mopd" else [])
    if s["mode"] == "async":
        out += ["rl.mode=async", "rl.max_staleness=1"]
    if s["ranks"] == 2 and s["backend"] == "ray":  # the 2 learner ranks are Ray actors too, a CPU each
        out += ["ray.num_cpus=3"]
    if s["params"] == "lora":
        out += ["model.lora.r=4"]
    if s["algo"] == "mopd":
        out += [f"roles.teachers=[{{name: t, path: {teachers[s['envs']]}}}]"]
    if s["algo"] == "ppo":
        out += ["roles.critic.pretrain_steps=0"]
    return out


def _validated_trajectories(run: Path) -> int:
    from tracerl.contract import validate
    from tracerl.store import Store

    with Store(run / "store.sqlite") as store:
        trajs = list(store.trajectories(stage="rl"))
        for t in trajs:
            validate(t)
    return len(trajs)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("row", ROWS, ids=lambda r: "-".join(str(v) for v in settings(r).values()))
def test_every_pair_of_settings_runs(row, teachers, tmp_path):
    s = settings(row)
    run = tmp_path / "run"
    recipe = "smoke" if s["envs"] == "one" else str(TWO_ENV)
    r = _train([recipe, f"run.dir={run}", *SMALL, *overrides(s, teachers)])
    assert r.returncode == 0, r.stderr[-4000:]
    assert _validated_trajectories(run) > 0
    steps = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [m for m in steps if "policy/updates" in m or "reward/mean" in m]
    assert len(rl) >= 1 and any(m.get("policy/updates", 0) > 0 and m.get("policy/grad_norm", 0) > 0 for m in rl), rl
    keys = set().union(*rl)
    manifest = json.loads((run / "manifest.json").read_text())
    config = (run / "config.yaml").read_text()
    if s["mode"] == "async":
        assert "async/staleness/mean" in keys
    if s["envs"] == "two":
        assert any(m.get("domain/arith/episodes", 0) > 0 for m in rl) and any(
            m.get("domain/math_tool/episodes", 0) > 0 for m in rl)
    if s["params"] == "lora":
        assert (run / "checkpoints/step_2/adapter_model.safetensors").exists()
    if s["ranks"] == 2:
        assert "ranks: 2" in config
    assert manifest["backend"]["name"] == s["backend"]
    if s["engine"] == "hf":
        assert "name: hf" in config
    want = {"ppo": "critic/", "prime": "prm/", "mopd": "mopd/reverse_kl/t", "grpo": "policy/pg_loss"}[s["algo"]]
    assert any(k.startswith(want) for k in keys), sorted(keys)


def test_rft_slices_and_audits_run_over_several_environments(tmp_path):
    """Rejection sampling plays every environment's tasks, each in its own environment; eval slices and the
    audit gate run per environment (all three were once refused with envs:)."""
    from tracerl.store import Store

    run = tmp_path / "run"
    r = _train([str(HERE / "combos_features.yaml"), f"run.dir={run}"])
    assert r.returncode == 0, r.stderr[-4000:]
    with Store(run / "store.sqlite") as store:
        assert sorted({t.env_name for t in store.trajectories(stage="rft")}) == ["calc_json", "math_tool"]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    keys = set().union(*rows)
    assert {"eval/math_tool/slice/tool_error/success", "eval/calc_json/slice/tool_error/success"} <= keys
    audit = [m for m in rows if "verifier/audit_cases" in m]
    assert audit and all(m["verifier/audit_cases"] == m["verifier/math_tool/audit_cases"]
                         + m["verifier/calc_json/audit_cases"] > 0 for m in audit)
