"""One shell command inside the sandbox over a file system kept on the host (terminal and swe envs).

Each sandbox call starts from a fresh tmpfs, so the environment keeps the working directory's
files on the host (`dict[path, text]`) and every command runs as: write those files, run
`/bin/sh -c CMD` in them, read the tree back. The command's stdout/stderr reach the harness through
pipes; the tree comes back as JSON on a line after a per-call nonce. A command that forges that
line can only claim files it could have written anyway, so the file state stays the policy's own
doing; graders never trust it for more than that (they run their checks in a fresh call).
"""

from __future__ import annotations

import dataclasses
import json
import secrets

from tracerl.sandbox import Limits, default_sandbox

LIMITS = Limits(cpu_s=2.0, wall_s=4.0, memory_bytes=256 << 20, output_bytes=256 << 10, nproc=16)
MAX_FILES = 64
MAX_FILE_CHARS = 8000

_HARNESS = r'''
import json, os, subprocess, sys
req = json.loads(sys.stdin.read())
try:
    r = subprocess.run(["/bin/sh", "-c", req["cmd"]], capture_output=True, stdin=subprocess.DEVNULL,
                       timeout=req["timeout"])
    rc, out, err = r.returncode, r.stdout, r.stderr
except subprocess.TimeoutExpired as e:
    rc, out, err = 124, e.stdout or b"", (e.stderr or b"") + b"timeout"
files = {}
for root, dirs, names in os.walk("."):
    dirs.sort()
    for n in sorted(names):
        p = os.path.join(root, n)
        if len(files) >= req["max_files"] or os.path.islink(p) or not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            files[p[2:]] = f.read(req["max_chars"] + 1).decode("utf-8", "replace")
print(req["nonce"] + json.dumps({"rc": rc, "out": out[-2000:].decode("utf-8", "replace"),
                                 "err": err[-2000:].decode("utf-8", "replace"), "files": files}))
'''


@dataclasses.dataclass
class ShellResult:
    status: str  # "ok" (the harness reported), "crash" (the sandbox failed), else the sandbox status
    exit_code: int | None
    stdout: str
    stderr: str
    files: dict[str, str] | None  # the working tree after the command; None when it could not be read

    @property
    def infra_failure(self) -> bool:
        return self.status == "crash"


def run_shell(cmd: str, files: dict[str, str], *, sandbox=None, limits: Limits = LIMITS) -> ShellResult:
    nonce = secrets.token_hex(8)
    req = {"cmd": cmd, "nonce": nonce, "timeout": max(0.5, limits.wall_s - 1.5), "max_files": MAX_FILES,
           "max_chars": MAX_FILE_CHARS}
    try:
        res = (sandbox or default_sandbox()).run(_HARNESS, stdin=json.dumps(req), files=dict(files), limits=limits)
    except Exception as err:  # the sandbox itself failed: never a policy outcome
        return ShellResult("crash", None, "", repr(err)[:200], None)
    if res.status == "crash":
        return ShellResult("crash", None, "", (res.reason or res.stderr or "")[-200:], None)
    for line in reversed(res.stdout.splitlines()):
        if line.startswith(nonce):
            try:
                got = json.loads(line[len(nonce):])
            except ValueError:
                break
            return ShellResult("ok", int(got["rc"]), got["out"], got["err"],
                               {str(k): str(v)[:MAX_FILE_CHARS] for k, v in got["files"].items()})
    return ShellResult(str(res.status), res.exit_code, "", (res.stderr or str(res.status))[-200:], None)
