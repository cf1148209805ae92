"""One warm sandbox per test module; after every test it must still answer (the pool survived)."""

import pytest
from sandbox_helpers import SMALL

from tracerl.sandbox import Sandbox


@pytest.fixture(scope="module")
def box():
    sandbox = Sandbox(limits=SMALL)
    if sandbox.level != "full":
        pytest.skip(f"full isolation unavailable here ({'; '.join(sandbox.plan.missing)})")
    yield sandbox
    sandbox.close()


@pytest.fixture(autouse=True)
def pool_survives(request):
    """Every case ends with the same warm worker still answering a trivial call."""
    if "box" not in request.fixturenames:
        yield
        return
    sandbox = request.getfixturevalue("box")
    sandbox.run("pass")
    before = sandbox.worker_pid()
    yield
    after = sandbox.run("print('still here')")
    assert after.status == "ok" and after.stdout == "still here\n", after
    assert sandbox.worker_pid() == before, "the warm worker was replaced: the attack took it down"
