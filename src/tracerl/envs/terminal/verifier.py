"""The terminal verifier: the final file system and a re-run of the policy's script on fresh data.

Evidence: `{"files": the working tree at the end of the episode}` (None when the episode ended
without one). `success` is 1 when both hold:
  * outputs: out.txt in the final tree equals the job's result on the visible data.txt;
  * the script: solve.sh from the final tree, copied alone into a fresh sandbox call next to each
    hidden data.txt (pristine, never seen by the policy), writes that data's result to out.txt.
So writing the expected output directly, a script that hard-codes it or exits 0, edits to data.txt,
and files left behind for the script to copy all fail; the transcript is never read.
`visible` (weight 0) records the first check alone.
"""

from __future__ import annotations

from tracerl.envs._shell import run_shell
from tracerl.envs._verify import EnvVerifier
from tracerl.verifiers.registry import register_verifier

NAME = "terminal.fs_state"


def _same(a: str | None, b: str) -> bool:
    return a is not None and a.rstrip("\n").split("\n") == b.rstrip("\n").split("\n")


def _norm_count(text: str | None) -> str | None:
    return None if text is None else "\n".join(x.strip() for x in text.strip().split("\n")) + "\n"


class TerminalFSState(EnvVerifier):
    name, revision, env = NAME, "terminal-fs-state-1", "terminal"
    components, primary = ("success", "visible"), "success"

    def __init__(self, sandbox=None) -> None:
        self._sandbox = sandbox

    def score(self, task, evidence):
        files = (evidence or {}).get("files")
        if files is None:
            return {"success": 0.0, "visible": 0.0}, {"reason": "no file system at the end"}
        exp = task.tests["expected"]
        visible = float(_same(_norm_count(files.get("out.txt")), _norm_count(exp)))
        script = files.get("solve.sh")
        if not visible or script is None:
            return {"success": 0.0, "visible": visible}, {"reason": "out.txt wrong" if not visible else "no solve.sh"}
        for i, case in enumerate(task.tests["hidden"]):
            res = run_shell("sh solve.sh", {**case["files"], "solve.sh": script}, sandbox=self._sandbox)
            if res.infra_failure:
                raise RuntimeError(f"sandbox fault while re-running solve.sh: {res.stderr}")
            if res.files is None or not _same(_norm_count(res.files.get("out.txt")), _norm_count(case["expected"])):
                return {"success": 0.0, "visible": visible}, {"reason": f"solve.sh wrong on hidden data {i}"}
        return {"success": 1.0, "visible": visible}, {"reason": "out.txt and solve.sh correct"}


register_verifier(NAME, TerminalFSState, replace=True)
