import json

import pytest

from tracerl.tasks import Task


def task(tid: str, prompt: str, *, source: str = "src", answer="1", split: str = "train", **kw) -> Task:
    return Task(id=tid, source=source, prompt=prompt, answer=answer, split=split, **kw)


@pytest.fixture
def make_task():
    return task


@pytest.fixture
def write_jsonl(tmp_path):
    """Writes rows (dicts, or raw strings written verbatim) one per line; returns the path."""

    def write(rows, name: str = "tasks.jsonl"):
        path = tmp_path / name
        path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
        return path

    return write
