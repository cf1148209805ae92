"""`tracerl export`: stage and step columns, prefix stage filters, a filter matching nothing is exit 2
with no file written, decoded text, structs in Parquet, and the learner's advantage and loss weight."""

import json
import os
import subprocess
import sys

import pytest

TRACERL = [sys.executable, "-m", "tracerl.cli"]


def _run(*args, timeout=240):
    return subprocess.run([*TRACERL, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "smoke"
    proc = _run("train", "smoke", f"run.dir={path}", "run.threads=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]  # the run ends by saying what to do next
    assert last.startswith(f"next: tracerl report {path} | tracerl inspect {path}") and "checkpoint " in last
    return path


def _sizes():
    from tracerl.config import load_recipe

    r = load_recipe("smoke")
    return r.rl.steps, r.rl.prompts_per_step * r.rl.group_size, r.eval.tasks * r.eval.samples


def _jsonl(*args):
    proc = _run("export", *args)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_stage_and_step_columns_and_prefix_filter(run_dir):
    every = _jsonl(str(run_dir))
    stages = {r["stage"] for r in every}
    assert "rl" in stages and any(s.startswith("eval/") for s in stages)
    steps, per_step, per_eval = _sizes()  # smoke: 2 steps of prompts x group episodes; tasks x samples per eval
    evals = _jsonl(str(run_dir), "--stage", "eval")
    assert len(evals) == 2 * per_eval and all(r["stage"].startswith("eval/") for r in evals)  # after SFT, after RL
    rl = _jsonl(str(run_dir), "--stage", "rl")
    assert len(rl) == steps * per_step and {r["step"] for r in rl} == set(range(1, steps + 1))  # 1..N, as logged
    step1 = _jsonl(str(run_dir), "--stage", "rl", "--step", "1")
    assert len(step1) == per_step and all(r["step"] == 1 for r in step1)


def test_filter_matching_nothing_is_exit_2_and_writes_nothing(run_dir, tmp_path):
    out = tmp_path / "none.jsonl"
    for args in (["--stage", "evl"], ["--stage", "rl", "--step", "99"], ["--stage", "ev"]):
        proc = _run("export", str(run_dir), "--out", str(out), *args)
        assert proc.returncode == 2 and "no trajectories of" in proc.stderr, args
        assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


def test_text_and_credit_columns(run_dir):
    rl = _jsonl(str(run_dir), "--stage", "rl")
    r = rl[0]
    assert r["prompt_text"].startswith("<|im_start|>system") and r["completion_text"]
    assert all(isinstance(x["advantage"], float) and x["loss_weight"] in (0.0, 1.0) for x in rl)
    assert any(x["advantage"] != 0.0 for x in rl)  # the smoke recipe takes real updates
    # what the update used: a row with loss weight 0 (truncated, masked) carries no credit; in a group,
    # rows above the group's mean reward get a positive advantage, rows below a negative one
    groups = {}
    for x in rl:
        groups.setdefault((x["step"], x["group_id"]), []).append(x)
    for rows in groups.values():
        mean = sum(r["reward"] for r in rows) / len(rows)
        for r in rows:
            if r["loss_weight"] == 0.0:
                assert r["advantage"] == 0.0
            elif r["reward"] != mean:
                assert (r["advantage"] > 0) == (r["reward"] > mean)
    ev = _jsonl(str(run_dir), "--stage", "eval")
    assert all(x["advantage"] is None and x["loss_weight"] is None for x in ev)  # evaluation never trains


def test_parquet_structs_and_datasets(run_dir, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "rl.parquet"
    proc = _run("export", str(run_dir), "--format", "parquet", "--out", str(out), "--stage", "rl")
    assert proc.returncode == 0, proc.stderr
    table = pq.read_table(out)
    steps, per_step, _ = _sizes()
    assert table.num_rows == steps * per_step
    assert pa.types.is_struct(table.schema.field("spans").type.value_type)
    comps = table.column("reward_components").to_pylist()[0]
    assert {c["name"] for c in comps} >= {"correct"}
    assert table.column("stage").to_pylist() == ["rl"] * table.num_rows
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset("parquet", data_files=str(out), split="train")
    assert len(ds) == table.num_rows and ds[0]["spans"][0]["kind"] == "prompt"


def test_inspect_shows_the_credit_the_learner_gave(run_dir):
    rl = _jsonl(str(run_dir), "--stage", "rl", "--step", "1")
    first = rl[0]
    proc = _run("inspect", str(run_dir), "--trajectory", first["trajectory_id"], "--logprobs", "--color", "never")
    assert proc.returncode == 0, proc.stderr
    assert f"advantage {first['advantage']:+.4g}  loss weight {first['loss_weight']:g}  (update at step 1)" in proc.stdout
    assert f"A{first['advantage']:+.2f}⟩" in proc.stdout  # on every action token
    ev = _jsonl(str(run_dir), "--stage", "eval")[0]
    proc = _run("inspect", str(run_dir), "--trajectory", ev["trajectory_id"], "--color", "never")
    assert "no update used this episode" in proc.stdout


def test_one_step_number_names_one_update_in_metrics_store_export_and_report(run_dir):
    """`rl step 2/2` on the console, step 2 in metrics.jsonl, the store, `tracerl export`, `tracerl inspect`,
    the report's data and the checkpoint step_2 are the same update: its reward mean agrees everywhere."""
    from tracerl.eval.report.episodes import breakdown_series
    from tracerl.eval.report.series import load_series
    from tracerl.store import RunDir
    from tracerl.store.credit import read_credit

    steps, per_step, _ = _sizes()
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r for r in rows if r["stage"] == "rl"}
    assert sorted(logged) == list(range(1, steps + 1))
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))[-1] == f"step_{steps}"
    run = RunDir(run_dir)
    try:
        credit = read_credit(run.store)
        stored = {s: list(run.store.trajectories(stage="rl", step=s)) for s in logged}
        stored_evals = {s for (s,) in run.store._db.execute("SELECT DISTINCT step FROM trajectories WHERE stage LIKE 'eval/%'")}
    finally:
        run.close()
    exported = _jsonl(str(run_dir), "--stage", "rl")
    report = load_series(run_dir)
    by_env = dict(breakdown_series(run_dir)[("rl", "by_env/math_tool/reward")])
    for s, m in logged.items():
        trajs = stored[s]
        assert len(trajs) == per_step and all(credit[t.trajectory_id]["update_step"] == s for t in trajs)
        mean = sum(t.reward for t in trajs) / len(trajs)  # no infra failures in smoke: every episode counts
        assert m["reward/mean"] == pytest.approx(mean)
        assert sum(r["reward"] for r in exported if r["step"] == s) / per_step == pytest.approx(mean)
        assert (s, pytest.approx(mean)) in report[("rl", "reward/mean")] and by_env[s] == pytest.approx(mean)
    # update s samples with the version update s-1 published: one version per step, one higher each step
    versions = [{v for t in stored[s] for v in t.policy_versions if v >= 0} for s in sorted(logged)]
    assert all(len(v) == 1 for v in versions) and [min(v) for v in versions] == list(range(min(versions[0]), min(versions[0]) + steps))
    # held-out evaluations: after SFT (0 updates) and after the last update (step N), in metrics and in the store
    eval_steps = {r["step"] for r in rows if r["stage"] == "eval"}
    assert eval_steps == stored_evals == {0, steps}
    proc = _run("inspect", str(run_dir), "--stage", "rl", "--color", "never", "--limit", "1")
    assert proc.returncode == 0 and f"step {steps}, stage rl: showing 1 of {per_step}" in proc.stdout


def test_messages_export_is_an_sft_file_that_trains(run_dir, tmp_path):
    """`export --format messages` writes OpenAI `messages` rows that `sft.data` loads and SFT trains on."""
    from tracerl.contract import is_success
    from tracerl.store import RunDir
    from tracerl.train.sft_data import load_conversations

    _, per_step, _ = _sizes()
    out = tmp_path / "rl.jsonl"
    proc = _run("export", str(run_dir), "--format", "messages", "--stage", "rl", "--step", "1", "--out", str(out))
    assert proc.returncode == 0 and f"wrote {per_step} conversations to {out}" in proc.stderr, proc.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    demos = load_conversations(out)  # the SFT loader accepts every line
    assert len(demos) == len(rows) == per_step and all(r["step"] == 1 and r["stage"] == "rl" for r in rows)
    run = RunDir(run_dir)
    try:
        stored = {t.trajectory_id: t for t in run.store.trajectories(stage="rl")}
        successes = sum(map(is_success, run.store.trajectories()))
    finally:
        run.close()
    for row, demo in zip(rows, demos):
        traj = stored[row["trajectory_id"]]
        assert [m["role"] for m in row["messages"][:2]] == ["system", "user"] and demo.task.prompt in row["messages"][1]["content"]
        assert row["reward"] == traj.reward and len(demo.turns) >= 1  # at least one assistant message
    # --correct: a run's good episodes only, as many as the store holds successes
    good = tmp_path / "good.jsonl"
    assert _run("export", str(run_dir), "--format", "messages", "--correct", "--out", str(good)).returncode == 0
    assert len(good.read_text().splitlines()) == successes
    assert _run("export", str(run_dir), "--correct").returncode == 2  # only meaningful for an SFT file
    # the round trip: SFT from the exported file, every conversation used
    trained = _run("train", "smoke", f"run.dir={tmp_path / 'sft'}", f"sft.data={out}", "stages=[sft]", "run.threads=1")
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert f"sft: {per_step} conversations from {out}" in trained.stdout and "sft: final loss" in trained.stdout
