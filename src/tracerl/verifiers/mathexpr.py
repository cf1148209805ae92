"""From an answer string (plain or LaTeX) to a small, validated Python-syntax expression.

Nothing here evaluates anything: the text is rewritten, tokenized, parsed with `ast`, and every
node is checked against a whitelist (numbers, single-letter symbols, + - * / ^, a few named
functions, tuples). The sympy worker rebuilds the expression from this AST without `eval`, so
an answer cannot run code. Pathological shapes that make computer algebra hang are refused here,
in microseconds: power towers, huge exponents or factorials, giant literals, deep nesting.
"""

from __future__ import annotations

import ast
import re

MAX_CHARS = 1000
MAX_NODES = 300
MAX_DEPTH = 40
MAX_LITERAL_DIGITS = 100
MAX_EXPONENT = 1000
MAX_FACTORIAL = 1000

FUNCTIONS = {"sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "sinh", "cosh",
             "tanh", "log", "ln", "exp", "abs", "factorial", "binomial", "gcd", "lcm", "floor", "ceiling"}
CONSTANTS = {"pi", "e", "i", "oo"}

# Words that join alternatives: "2 \text{ or } 3" must not become the product 2 * 3.
_HEDGE = re.compile(r"(?<![A-Za-z])(?:or|and|either|nor|maybe|possibly|perhaps|otherwise|else|vs|versus)(?![A-Za-z])|\\(?:lor|vee|pm|mp)(?![A-Za-z])|±|∓|∨",
                    re.IGNORECASE)

_LATEX_SIMPLE = [
    (r"\\left|\\right|\\displaystyle|\\!|\\,|\\;|\\:|\\quad|\\qquad", " "),
    (r"\\cdot|\\times", "*"), (r"\\div", "/"), (r"\\pi\b", "pi"), (r"\\infty", "oo"),
    (r"\\ln\b", "ln"), (r"\\log\b", "log"), (r"\\exp\b", "exp"),
    (r"\\(arcsin|arccos|arctan)\b", lambda m: "a" + m.group(1)[3:]),
    (r"\\(sin|cos|tan|cot|sec|csc|sinh|cosh|tanh)\b", r"\1"),
    (r"\\(?:text|mbox|mathrm)\{\s*[A-Za-z][A-Za-z .]+\}", ""),  # units and words: "5\text{ cm}" is 5
    (r"\\(?:text|mathrm|mathbf|operatorname)\{([^{}]*)\}", r"\1"), (r"\\\$", ""),
    (r"\^\\circ|°", ""), (r"\\%|%", "/100"), (r"\\\{|\\\}", ""),
]


class ExprError(ValueError):
    """The answer is not an expression this checker will hand to computer algebra (with why)."""


def _brace_arg(s: str, i: int) -> tuple[str, int]:
    """The `{...}` group starting at s[i] (or a single character), and the index after it."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        raise ExprError("a LaTeX command is missing its argument")
    if s[i] != "{":
        return s[i], i + 1
    depth = 0
    for j in range(i, len(s)):
        depth += {"{": 1, "}": -1}.get(s[j], 0)
        if depth == 0:
            return s[i + 1:j], j + 1
    raise ExprError("unbalanced braces")


def latex_to_plain(s: str) -> str:
    """Rewrite the LaTeX that answers use (\\frac, \\sqrt, ^{...}, \\cdot, \\pi, ...) to plain syntax."""
    s = s.strip().strip("$").strip()
    m = re.fullmatch(r"\\boxed\{(.*)\}", s, re.DOTALL)
    if m:
        s = m.group(1)
    for pattern, repl in _LATEX_SIMPLE:
        s = re.sub(pattern, repl, s)
    out, i = [], 0
    while i < len(s):
        m = re.match(r"\\[dt]?frac", s[i:])
        if m:
            num, i = _brace_arg(s, i + m.end())
            den, i = _brace_arg(s, i)
            out.append(f"(({latex_to_plain(num)})/({latex_to_plain(den)}))")
            continue
        if s.startswith("\\sqrt", i):
            i += 5
            root = None
            if i < len(s) and s[i] == "[":
                end = s.find("]", i)
                if end < 0:
                    raise ExprError("\\sqrt[ has no closing ]")
                root, i = s[i + 1:end], end + 1
            arg, i = _brace_arg(s, i)
            arg = latex_to_plain(arg)
            out.append(f"sqrt({arg})" if root is None else f"(({arg})**(1/({latex_to_plain(root)})))")
            continue
        if s[i] == "^":
            arg, i = _brace_arg(s, i + 1)
            out.append(f"**({latex_to_plain(arg)})")
            continue
        if s[i] == "\\":
            m = re.match(r"\\[A-Za-z]+", s[i:])
            raise ExprError(f"unsupported LaTeX command {m.group(0) if m else s[i:i + 2]!r}")
        out.append({"{": "(", "}": ")"}.get(s[i], s[i]))
        i += 1
    return "".join(out)


_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)|([A-Za-z]+)|(\*\*|[-+*/(),^=]))")


def _tokens(s: str) -> list[tuple[str, str]]:
    toks, pos = [], 0
    while pos < len(s):
        if s[pos:].strip() == "":
            break
        m = _TOKEN.match(s, pos)
        if not m:
            raise ExprError(f"unexpected character {s[pos:].strip()[:1]!r}")
        num, name, op = m.groups()
        if num is not None:
            toks.append(("num", num))
        elif name is not None:
            if name in FUNCTIONS or name in CONSTANTS:
                toks.append(("name", name))
            elif len(name) <= 2:  # 'xy' is x*y: short runs of letters are products of symbols
                toks.extend(("name", ch) for ch in name)
            else:
                raise ExprError(f"{name!r} is a word, not mathematics")
        else:
            toks.append(("op", "**" if op == "^" else op))
        pos = m.end()
    return toks


def _implicit_products(toks: list[tuple[str, str]]) -> str:
    out: list[str] = []
    prev: tuple[str, str] | None = None
    for tok in toks:
        if prev is not None:
            left_operand = prev[0] in ("num", "name") or prev == ("op", ")")
            right_operand = tok[0] in ("num", "name") or tok == ("op", "(")
            calls = prev[0] == "name" and prev[1] in FUNCTIONS and tok == ("op", "(")
            if left_operand and right_operand and not calls:
                out.append("*")
        out.append(tok[1])
        prev = tok
    return " ".join(out)


def to_python(answer: str) -> str:
    """The answer as a validated Python-syntax expression; raises ExprError with the reason."""
    if len(answer) > MAX_CHARS:
        raise ExprError(f"expression is {len(answer)} characters, more than {MAX_CHARS}")
    hedge = _HEDGE.search(answer)
    if hedge:
        raise ExprError(f"a hedged answer ({hedge.group(0)!r}) is not one value")
    plain = latex_to_plain(answer)
    if plain.count("=") == 1:  # 'x = 3' answers with its right-hand side
        lhs, rhs = plain.split("=")
        if not re.fullmatch(r"\s*[A-Za-z]\s*", lhs):
            raise ExprError("an equation is graded only in the form 'x = value'")
        plain = rhs
    expr = _implicit_products(_tokens(plain))
    if not expr:
        raise ExprError("empty expression")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"not a well-formed expression ({exc.msg})") from None
    validate(tree)
    return expr


def validate(tree: ast.AST) -> None:
    """Whitelist the nodes and refuse shapes that make computer algebra hang."""
    count = 0

    def visit(node: ast.AST, depth: int) -> None:
        nonlocal count
        count += 1
        if count > MAX_NODES or depth > MAX_DEPTH:
            raise ExprError("expression too large or too deeply nested")
        if isinstance(node, ast.Expression):
            return visit(node.body, depth + 1)
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float)) or isinstance(node.value, bool):
                raise ExprError("only numbers may appear as literals")
            if len(str(node.value)) > MAX_LITERAL_DIGITS:
                raise ExprError(f"a literal with more than {MAX_LITERAL_DIGITS} digits")
            return None
        if isinstance(node, ast.Name):
            if not (len(node.id) == 1 or node.id in CONSTANTS):
                raise ExprError(f"unknown name {node.id!r}")
            return None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            return visit(node.operand, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)):
            if isinstance(node.op, ast.Pow):
                _check_power(node)
            visit(node.left, depth + 1)
            return visit(node.right, depth + 1)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
            if node.keywords or not 1 <= len(node.args) <= 2:
                raise ExprError(f"{node.func.id} takes one or two plain arguments")
            if node.func.id == "factorial" and _literal(node.args[0], MAX_FACTORIAL + 1) > MAX_FACTORIAL:
                raise ExprError(f"factorial of more than {MAX_FACTORIAL}")
            for arg in node.args:
                visit(arg, depth + 1)
            return None
        if isinstance(node, ast.Tuple) and depth <= 2:
            for elt in node.elts:
                visit(elt, depth + 1)
            return None
        raise ExprError(f"{type(node).__name__} is not allowed in an answer")

    visit(tree, 0)


def _literal(node: ast.AST, big: float) -> float:
    """The magnitude of a literal numeric subexpression; `big` when it is not one (or too large)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return abs(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _literal(node.operand, big)
    return big


def _check_power(node: ast.BinOp) -> None:
    exponent = node.right
    inner = exponent.operand if isinstance(exponent, ast.UnaryOp) else exponent
    if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Pow):
        raise ExprError("power tower (a^b^c): refused, it can take computer algebra forever")
    if isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Pow) and _has_pow_literal(node.left):
        raise ExprError("stacked powers ((a^b)^c): refused, it can take computer algebra forever")
    base = _literal(node.left, 2.0)
    if base in (0, 1):
        return
    if _literal(exponent, 0.0) > MAX_EXPONENT:
        raise ExprError(f"exponent larger than {MAX_EXPONENT}")


def _has_pow_literal(node: ast.BinOp) -> bool:
    return _literal(node.right, 0.0) > 20
