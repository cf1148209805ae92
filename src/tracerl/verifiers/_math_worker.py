"""The sympy worker: one JSON request per line, one JSON answer per line.

Started as a zygote (`zygote FD`): it imports sympy once, warms its caches, then forks a worker
for each socket the host passes it over the control socket FD, and kills (and reaps) a worker the
host names. A worker killed at its deadline is replaced by a fork of the warm zygote in about a
millisecond, not by a fresh interpreter that re-imports sympy. Every process runs under the
address-space limit the host set before the zygote started. Without arguments the program serves
stdin/stdout itself. Expressions arrive already validated by tracerl.verifiers.mathexpr and are
rebuilt node by node from their AST, never with eval or sympify of raw text.
"""

import ast
import json
import os
import signal
import socket
import sys

import sympy

SYMBOLS = {}
CONSTANTS = {"pi": sympy.pi, "e": sympy.E, "i": sympy.I, "oo": sympy.oo}
FUNCTIONS = {"sqrt": sympy.sqrt, "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot,
             "sec": sympy.sec, "csc": sympy.csc, "asin": sympy.asin, "acos": sympy.acos, "atan": sympy.atan,
             "sinh": sympy.sinh, "cosh": sympy.cosh, "tanh": sympy.tanh, "log": sympy.log, "ln": sympy.log,
             "exp": sympy.exp, "abs": sympy.Abs, "factorial": sympy.factorial, "binomial": sympy.binomial,
             "gcd": sympy.gcd, "lcm": sympy.lcm, "floor": sympy.floor, "ceiling": sympy.ceiling}


def build(node):
    if isinstance(node, ast.Expression):
        return build(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, int):
            return sympy.Integer(node.value)
        return sympy.Rational(repr(node.value))  # '0.1' exactly, not the binary float
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        return SYMBOLS.setdefault(node.id, sympy.Symbol(node.id))
    if isinstance(node, ast.UnaryOp):
        value = build(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = build(node.left), build(node.right)
        op = type(node.op)
        if op is ast.Add:
            return left + right
        if op is ast.Sub:
            return left - right
        if op is ast.Mult:
            return left * right
        if op is ast.Div:
            return left / right
        if op is ast.Pow:
            return left ** right
    if isinstance(node, ast.Call):
        return FUNCTIONS[node.func.id](*[build(a) for a in node.args])
    if isinstance(node, ast.Tuple):
        return tuple(build(e) for e in node.elts)
    raise ValueError(f"unexpected node {type(node).__name__}")


def _rationals_equal(a, b, tol, ref_exact):
    """Two rational numbers: exactly when both are integers, the reference was written exactly or no
    decimal was written (tol 0); else within tol relative, held under 1/2 beside an integer (as
    `answers.numbers_match`)."""
    diff = abs(a - b)
    if tol == 0 or ref_exact or (a.is_Integer and b.is_Integer):
        return diff == 0, "" if diff == 0 else f"different numbers (by {diff})"
    bound = tol * max(1, abs(b))
    close = diff <= bound and (diff < sympy.Rational(1, 2) or not (a.is_Integer or b.is_Integer))
    return bool(close), "" if close else f"numerically different by {sympy.N(diff, 6)}"


def _exactly_zero(diff, scale):
    """A constant difference, decided exactly: a clear numeric non-zero refutes it at once;
    otherwise only `simplify` reaching 0 proves it (no tolerance: 10**30 + 1 is not 10**30)."""
    value = sympy.N(diff, 30)
    if value.is_number and value.is_finite is not False and abs(value) > sympy.Float("1e-20") * scale:
        return False, f"numerically different by {sympy.N(value, 6)}"
    if sympy.simplify(diff) == 0:
        return True, ""
    return False, "not provably equal (compared exactly)"


def equal(a, b, tol, ref_exact=False):
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple)) or len(a) != len(b):
            return False, "different number of parts"
        for x, y in zip(a, b):
            ok, why = equal(x, y, tol, ref_exact)
            if not ok:
                return False, why
        return True, ""
    if a.has(sympy.zoo, sympy.nan) or b.has(sympy.zoo, sympy.nan):
        return False, "undefined value (division by zero or nan)"
    if a.has(sympy.oo) != b.has(sympy.oo):
        return False, "infinite on one side only"
    diff = a - b
    if a.is_Rational and b.is_Rational:
        return _rationals_equal(a, b, tol, ref_exact)
    if not diff.free_symbols:
        scale = 1
        if not b.free_symbols and b.is_finite is not False:
            scale = max(1, abs(sympy.N(b, 30)))
        if tol == 0:  # no decimal written: exact forms are compared exactly
            return _exactly_zero(diff, scale)
        value = sympy.N(diff, 30)
        if value.is_number and value.is_finite is not False:
            close = abs(value) <= tol * scale
            return bool(close), "" if close else f"numerically different by {sympy.N(value, 6)}"
        return bool(sympy.simplify(diff) == 0), "compared symbolically"
    if sympy.expand(diff) == 0:
        return True, ""
    # Refute cheaply first: a difference that is clearly non-zero at a random rational point is
    # not identically zero (this can only turn a match into a non-match, never the reverse).
    symbols = sorted(diff.free_symbols, key=str)
    for trial in range(3):
        point = {sym: sympy.Rational(2 * k + trial + 3, 7 + trial) for k, sym in enumerate(symbols)}
        value = sympy.N(diff.subs(point), 20)
        if value.is_number and value.is_finite and abs(value) > max(tol, 1e-12) * (1 + abs(sympy.N(b.subs(point), 20))):
            return False, f"differs at {dict((str(k), str(v)) for k, v in point.items())}"
    if sympy.simplify(diff) == 0:
        return True, ""
    return False, "symbolically different"


def warm():
    sys.setrecursionlimit(10000)
    for a, b in (("(x+1)**2", "x**2+2*x+1"), ("sqrt(8)", "2*sqrt(2)"), ("pi/2", "1.5707963")):
        equal(build(ast.parse(a, mode="eval")), build(ast.parse(b, mode="eval")), 1e-9)  # warm sympy's caches


def serve(rfile, wfile):
    for line in rfile:
        req = json.loads(line)
        try:
            ok, why = equal(build(ast.parse(req["a"], mode="eval")), build(ast.parse(req["b"], mode="eval")),
                            req.get("tol", 1e-9), req.get("ref_exact", False))
            answer = {"equal": ok, "reason": why}
        except Exception as exc:  # noqa: BLE001 - any failure is a non-match, with its reason
            answer = {"equal": False, "reason": f"{type(exc).__name__}: {exc}"[:300]}
        wfile.write(json.dumps(answer) + "\n")
        wfile.flush()


def zygote(fd):
    """Control messages, one per line: `fork` (with one socket attached) -> the worker's pid;
    `kill PID` -> `ok` once the worker is dead and reaped; `quit` kills every worker and exits."""
    ctl = socket.socket(fileno=fd)
    children = set()
    ctl.sendall(b'{"ready": true}\n')
    while True:
        msg, fds, _, _ = socket.recv_fds(ctl, 256, 1)
        words = msg.decode().split()
        for pid in list(children):  # workers that ended by themselves
            if os.waitpid(pid, os.WNOHANG)[0]:
                children.discard(pid)
        if not words or words[0] == "quit":
            for pid in children:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            os._exit(0)
        if words[0] == "fork" and fds:
            pid = os.fork()
            if pid == 0:
                ctl.close()
                conn = socket.socket(fileno=fds[0])
                serve(conn.makefile("r"), conn.makefile("w"))
                os._exit(0)
            os.close(fds[0])
            children.add(pid)
            ctl.sendall(f"{pid}\n".encode())
        elif words[0] == "kill":
            pid = int(words[1])
            if pid in children:  # never a pid we do not own (it could have been reused)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                children.discard(pid)
            ctl.sendall(b"ok\n")


def main():
    warm()
    if len(sys.argv) >= 3 and sys.argv[1] == "zygote":
        zygote(int(sys.argv[2]))
    print(json.dumps({"ready": True}), flush=True)
    serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
