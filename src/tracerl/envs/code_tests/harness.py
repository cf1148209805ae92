"""Runs candidate code on test cases in the sandbox and grades it outside the candidate's process.

The sandboxed program is the candidate's source followed by a driver that calls `f` on each input
and prints one line per case: a per-call random nonce, the case index and `repr` of the result (or
of the exception). Expected values never enter the sandbox; the host compares the printed `repr`s
with its own. So a candidate cannot pass by overriding `__eq__`, exiting early, printing fake
verdicts, or editing the tests: the only way to produce a matching line is to return the value.
"""

from __future__ import annotations

import dataclasses
import json
import secrets

from tracerl.sandbox import Limits, Sandbox, default_sandbox

LIMITS = Limits(wall_s=2.0, cpu_s=1.0, memory_bytes=256 << 20, output_bytes=8192)

_DRIVER = """
import json as _json
for _i, _arg in enumerate(_json.loads({inputs!r})):
    try:
        _out = repr(f(_arg))
    except BaseException as _e:
        _out = "raised " + type(_e).__name__
    print({nonce!r}, _i, _out[:200], flush=True)
"""


@dataclasses.dataclass
class Outcome:
    status: str  # the sandbox status: ok, error, timeout, memory, output_limit, blocked, crash
    passed: int
    total: int
    feedback: str  # one short line for the policy

    @property
    def infra_failure(self) -> bool:
        return self.status == "crash"


def evaluate(code: str, cases: list, sandbox: Sandbox | None = None, limits: Limits = LIMITS) -> Outcome:
    nonce = secrets.token_hex(8)
    program = code + "\n" + _DRIVER.format(inputs=json.dumps([x for x, _ in cases]), nonce=nonce)
    res = (sandbox or default_sandbox()).run(program, limits=limits)
    if res.status == "crash":
        return Outcome("crash", 0, len(cases), f"sandbox fault: {res.reason or res.stderr[-120:]}")
    got: dict[int, str] = {}
    for line in res.stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == nonce and parts[1].isdigit():
            got.setdefault(int(parts[1]), parts[2])
    passed, feedback = 0, ""
    for i, (x, y) in enumerate(cases):
        if got.get(i) == repr(y):
            passed += 1
        elif not feedback:
            seen = got.get(i)
            if seen is None:
                last = (res.stderr.strip().splitlines() or [str(res.status)])[-1]
                feedback = f"{res.status}: {last[:80]}"
            else:
                feedback = f"f({x!r}) gave {seen[:40]}, want {y!r}"
    return Outcome(str(res.status), passed, len(cases), feedback)
