"""The span log (`tracerl serve --spans FILE --spans-max-mb M`) stays under its cap: it rotates to FILE.1, never
splits a line, and keeps the newest records."""

import argparse
import json

from tracerl.commands.serve import register
from tracerl.serve import EpisodeRegistry
from tracerl.serve.spanlog import SpanLog


def test_rotates_to_dot_one_before_a_line_would_pass_the_cap(tmp_path):
    path = tmp_path / "spans.jsonl"
    log = SpanLog(path, max_bytes=25)
    for i in range(7):  # each line is 10 bytes: two fit under 25, the third rotates
        log.write(f"line-{i:03d}\n")
    log.close()
    # lines 0,1 -> rotated; 2,3 -> rotated (replacing the first .1); 4,5 -> rotated; 6 in FILE
    assert (tmp_path / "spans.jsonl.1").read_text() == "line-004\nline-005\n"
    assert path.read_text() == "line-006\n" and log.rotations == 3


def test_no_cap_keeps_one_growing_file_and_reopening_counts_what_is_there(tmp_path):
    path = tmp_path / "spans.jsonl"
    log = SpanLog(path)
    for i in range(100):
        log.write("x" * 99 + "\n")
    log.close()
    assert path.stat().st_size == 10_000 and not (tmp_path / "spans.jsonl.1").exists()
    log = SpanLog(path, max_bytes=10_050)  # a restarted server: the 10,000 bytes already there count
    log.write("y" * 99 + "\n")
    log.close()
    assert path.read_text() == "y" * 99 + "\n" and (tmp_path / "spans.jsonl.1").stat().st_size == 10_000


def test_registry_log_stays_under_the_cap_with_every_line_whole(tmp_path):
    path = tmp_path / "spans.jsonl"
    reg = EpisodeRegistry(span_log=path, span_log_max_bytes=2048)
    for i in range(60):
        reg.start(f"ep-{i}", metadata={"pad": "p" * 40})
    reg.close()
    files = [tmp_path / "spans.jsonl.1", path]
    assert all(f.stat().st_size <= 2048 for f in files)
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]  # every line parses
    # 60 starts, then 60 ends at close (still open: infra_failure), ~290 bytes a line: the newest lines, in order
    ids = [(r["record"], r["episode_id"]) for r in records]
    every = [("episode_start", f"ep-{i}") for i in range(60)] + [("episode_end", f"ep-{i}") for i in range(60)]
    assert 2 <= len(ids) < 120 and ids == every[-len(ids):]


def test_serve_command_has_the_cap():
    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    assert p.parse_args(["serve", "--model", "m", "--spans", "s.jsonl"]).spans_max_mb == 1024.0
    assert p.parse_args(["serve", "--model", "m", "--spans-max-mb", "0.5"]).spans_max_mb == 0.5
