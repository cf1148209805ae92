"""The task families adapted from the `reasoning-gym` package: configs per difficulty level, short
prompts for tiny models, and guards that run before the package's own scorers.

The guards exist because two scorers accept too much (found by this env's audit set, against
reasoning-gym 0.1.25): `puzzle24` checks that four numbers in range appear and that
`int(value) == 24`, but not that they are the puzzle's numbers (`(2+4)*(1+3)` scores 1.0 for the
numbers 2 6 6 4) nor that the value is exactly 24 (`int()` truncates 24.5); and it evaluates the
answer with sympy's `parse_expr`, which calls `eval` on policy text. The guard admits only digits,
`+ - * / ( )` and spaces, requires the puzzle's exact multiset of numbers, and evaluates the
expression exactly with fractions before the package scorer is consulted.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from fractions import Fraction

LEVELS = (0, 1, 2)

CONFIGS: dict[str, dict[int, dict]] = {
    "basic_arithmetic": {
        0: dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, operators=("+", "-"),
                allow_parentheses=False, allow_negation=False),
        1: dict(min_terms=2, max_terms=3, min_digits=1, max_digits=1, operators=("+", "-", "*"),
                allow_parentheses=False, allow_negation=False),
        2: dict(min_terms=3, max_terms=4, min_digits=1, max_digits=2, operators=("+", "-", "*"),
                allow_parentheses=True, allow_negation=False),
    },
    "chain_sum": {
        0: dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
        1: dict(min_terms=3, max_terms=3, min_digits=1, max_digits=1),
        2: dict(min_terms=3, max_terms=4, min_digits=1, max_digits=2),
    },
    "simple_equations": {
        0: dict(min_terms=2, max_terms=2, min_value=1, max_value=9, operators=("+", "-"), operators_weights=[0.5, 0.5]),
        1: dict(min_terms=2, max_terms=2, min_value=1, max_value=20),
        2: dict(min_terms=2, max_terms=3, min_value=1, max_value=50),
    },
    "puzzle24": {0: dict(min_value=1, max_value=6), 1: dict(min_value=1, max_value=8),
                 2: dict(min_value=1, max_value=10)},
}
FAMILIES = tuple(CONFIGS)
_NUMBER = re.compile(r"-?\d+")
_EXPR_CHARS = re.compile(r"[0-9+\-*/() ]+")


def prompt(family: str, entry: dict) -> str:
    meta = entry["metadata"]
    if family in ("basic_arithmetic", "chain_sum"):
        return f"compute {meta['expression']}"
    if family == "simple_equations":
        return f"solve for {meta['variable']}: {meta['equation']}"
    if family == "puzzle24":
        return f"make 24 from {' '.join(map(str, meta['numbers']))} with + - * / ( ), each number once"
    return entry["question"]


def guard(family: str, answer: str, entry: dict) -> str | None:
    """None if the answer may be passed to the package scorer, else the reason it may not."""
    if family == "puzzle24":
        if not _EXPR_CHARS.fullmatch(answer):
            return "only digits, + - * / ( ) and spaces are allowed"
        if Counter(int(x) for x in re.findall(r"\d+", answer)) != Counter(entry["metadata"]["numbers"]):
            return "must use exactly the puzzle's numbers, each once"
        value = _exact_value(answer)
        if value != 24:
            return f"evaluates to {value}, not exactly 24"
        return None
    if not _NUMBER.fullmatch(answer):
        return "the answer must be a single integer"
    return None


def _exact_value(expr: str) -> Fraction | None:
    try:
        return _eval(ast.parse(expr, mode="eval").body)
    except (SyntaxError, ZeroDivisionError, ValueError, RecursionError):
        return None


def _eval(node: ast.AST, *, negation: bool = False) -> Fraction:
    """Exact value of an integer expression over + - * / (and unary minus where `negation`)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if negation and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, negation=True)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        a, b = _eval(node.left, negation=negation), _eval(node.right, negation=negation)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        return a / b
    raise ValueError("not an arithmetic expression over integers")


CALC_MAX_CHARS = 80


def calc(expr: str) -> str:
    """The calculator tool: the exact value of an integer expression over + - * / ( ) and unary
    minus, as an integer or a reduced fraction `p/q`. Raises ValueError (a malformed call) for
    anything else or an expression over `CALC_MAX_CHARS`, ZeroDivisionError for division by zero."""
    expr = expr.strip()
    if not expr or len(expr) > CALC_MAX_CHARS or not _EXPR_CHARS.fullmatch(expr):
        raise ValueError(f"write an expression of at most {CALC_MAX_CHARS} characters over digits, "
                         "+ - * / ( ) and spaces")
    try:
        value = _eval(ast.parse(expr, mode="eval").body, negation=True)
    except (SyntaxError, RecursionError) as err:
        raise ValueError("not a well-formed arithmetic expression") from err
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def consistent(family: str, entry: dict) -> bool:
    """Whether the package's reference answer is the exact value of its problem. Not always so in
    reasoning-gym 0.1.25: `basic_arithmetic` without parentheses prints `9 - 2 * 2` but answers 14,
    the value of `(9 - 2) * 2` (about 10% of level-1 problems); a correct policy would be scored
    wrong, so the generator redraws such problems."""
    if family == "puzzle24":
        return _exact_value(str(entry["answer"])) == 24
    try:
        return calc(calc_expression(family, entry)) == str(entry["answer"])
    except (ValueError, ZeroDivisionError):
        return False


def calc_expression(family: str, entry: dict) -> str:
    """What the expert types into the calculator: the expression itself; for an equation, its
    solution as an expression of the numbers (`q + 4 = 12` -> `12 - 4`); for 24-point, the
    reference solution (to check it makes 24)."""
    meta = entry["metadata"]
    if family in ("basic_arithmetic", "chain_sum"):
        return meta["expression"]
    if family == "simple_equations":
        lhs, rhs = (x.strip() for x in meta["equation"].split("="))
        coef, const = _linear(ast.parse(lhs, mode="eval").body, meta["variable"])
        c = const.numerator  # the generated equations have integer coefficients
        if coef == 1:
            return f"{rhs} - {c}" if c >= 0 else f"{rhs} + {-c}"
        if coef == -1:
            return f"{c} - {rhs}"
        return f"({rhs} - {c}) / {coef.numerator}"
    return str(entry["answer"])


def _linear(node: ast.AST, var: str) -> tuple[Fraction, Fraction]:
    """(coefficient, constant) of an expression linear in `var`."""
    if isinstance(node, ast.Name) and node.id == var:
        return Fraction(1), Fraction(0)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(0), Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        k, c = _linear(node.operand, var)
        return -k, -c
    if isinstance(node, ast.BinOp):
        (ka, ca), (kb, cb) = _linear(node.left, var), _linear(node.right, var)
        if isinstance(node.op, ast.Add):
            return ka + kb, ca + cb
        if isinstance(node.op, ast.Sub):
            return ka - kb, ca - cb
        if isinstance(node.op, ast.Mult) and (ka == 0 or kb == 0):
            return ka * cb + kb * ca, ca * cb
    raise ValueError(f"not linear in {var}")


def wrong_answer(family: str, entry: dict, rng) -> str:
    """A plausible answer that the guard and scorer reject (the expert's error mode)."""
    if family == "puzzle24":
        nums = list(entry["metadata"]["numbers"])
        for ops in ("+++", "*++", "+*+", "++*", "-++", "*-+", "+-*"):
            expr = "".join(f"{n}{o}" for n, o in zip(nums, ops)) + str(nums[-1])
            if _exact_value(expr) != 24:
                return expr
        return "+".join(map(str, nums)) + "+0"  # every pattern made 24: a sum with a foreign number
    return str(int(entry["answer"]) + rng.choice((-2, -1, 1, 2)))
