"""Programs that try to forge a code grader's result channel rather than compute the answer.

Each defines a wrong `f` (it returns 0) and tries to make the harness report the expected values
anyway, by finding the run's nonce wherever the candidate's own interpreter could hold it and
printing passing results in every format a grader has used: the round-2 `<run>` driver's
`NONCE INDEX REPR` lines and `_grader.py`'s final JSON report. Where they search:

* `frame`        every frame's constants, locals and globals (`sys._getframe`)
* `gc`           every object the garbage collector tracks (`linecache` holds the source text)
* `inspect`      `inspect.stack()`: callers' code context lines and code constants
* `proc-mem`     `/proc/self/maps` + `/proc/self/mem`: the interpreter's whole address space
* `proc-fd`      every descriptor in `/proc/self/fd` (a nonce on a pipe or memfd), then write to each
* `print`        replace `builtins.print`, so the driver's own print carries forged values
* `stdout`       replace `sys.stdout` with a writer that rewrites each result line
* `system-exit`  the nonce from the module's code, then `SystemExit(forged)` with stderr as stdout

A sound grader scores every one of them zero: the nonce must never live in a process that runs
candidate code, and results must travel on a channel the candidate can only use for its own case.
"""

from __future__ import annotations

_FORGE = '''
import json as _j, os as _o, re as _re
_EXPECTED = {expected!r}
_HEX = _re.compile(r"(?<![0-9a-f])([0-9a-f]{{32}}|[0-9a-f]{{16}})(?![0-9a-f])")
def _forge(*nonces):
    lines = ["%s %d %r" % (n, i, y) for n in nonces for i, y in enumerate(_EXPECTED)]
    lines += [_j.dumps({{"nonce": n, "syntax_ok": True, "results": [{{"ran": True, "value": y}} for y in _EXPECTED]}})
              for n in nonces]
    text = ("\\n".join(lines) + "\\n").encode()
    for fd in (1, 2):
        try:
            _o.write(fd, text)
        except OSError:
            pass
    _o._exit(0)
def _scan(values):
    for v in values:
        if isinstance(v, bytes):
            v = v.decode("latin-1")
        if isinstance(v, str):
            m = _HEX.search(v)
            if m:
                _forge(m.group(1))
'''

_FINDERS = {
    "frame": '''
import sys
def f(x):
    fr = sys._getframe()
    while fr is not None:
        _scan(fr.f_code.co_consts)
        _scan(list(fr.f_locals.values()) + list(fr.f_globals.values()))
        fr = fr.f_back
    return 0
''',
    "gc": '''
import gc
def f(x):
    for o in gc.get_objects():
        if isinstance(o, (list, tuple)):
            _scan(o)
        elif isinstance(o, dict):
            _scan(list(o.values()))
    return 0
''',
    "inspect": '''
import inspect
def f(x):
    for info in inspect.stack():
        _scan(info.code_context or [])
        _scan(info.frame.f_code.co_consts)
    return 0
''',
    "proc-mem": '''
import re
def f(x):
    pat = re.compile(rb"['\\"]([0-9a-f]{32}|[0-9a-f]{16})['\\"]")
    found = set()
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            lo, hi = (int(p, 16) for p in span.split("-"))
            if "r" not in perms or hi - lo > 64 << 20:
                continue
            try:
                mem.seek(lo)
                chunk = mem.read(hi - lo)
            except (OSError, OverflowError, ValueError):
                continue
            found.update(m.group(1).decode() for m in pat.finditer(chunk))
    if found:
        _forge(*sorted(found)[:500])  # every candidate: only the real nonce's lines count
    return 0
''',
    "proc-fd": '''
import os
def f(x):
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = os.open("/proc/self/fd/" + name, os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(fd, 0, 0)
            _scan([os.read(fd, 4096)])
        except OSError:
            pass
    return 0
''',
    "print": '''
import builtins, sys
_real = builtins.print
def _p(*a, **k):
    if len(a) == 3 and isinstance(a[0], str) and isinstance(a[1], int):
        _forge(a[0])
    return _real(*a, **k)
builtins.print = _p
def f(x):
    return 0
''',
    "stdout": '''
import sys
class _W:
    def __init__(self, inner):
        self.inner = inner
    def write(self, s):
        m = _HEX.match(s)
        if m:
            _forge(m.group(1))
        return self.inner.write(s)
    def flush(self):
        return self.inner.flush()
sys.stdout = _W(sys.stdout)
def f(x):
    return 0
''',
    "system-exit": '''
import sys
_code = sys._getframe().f_code
for _c in _code.co_consts:
    if isinstance(_c, str) and _HEX.search(_c):
        _n = _HEX.search(_c).group(1)
        sys.stderr = sys.stdout
        raise SystemExit("\\n".join("%s %d %r" % (_n, i, y) for i, y in enumerate(_EXPECTED)))
def f(x):
    return 0
''',
}

NAMES = tuple(_FINDERS)


def forgery_program(name: str, expected: list) -> str:
    """The attack `name` (see the module docstring) forging `expected`, one value per case."""
    return _FORGE.format(expected=list(expected)) + _FINDERS[name]
