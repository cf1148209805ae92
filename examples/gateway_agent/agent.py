"""A calculator agent written only against the `openai` client: no tracerl import.

It asks the model, runs the calculator when the model calls it (a JSON function call), sends the
result back as a `tool` message, and returns the model's final answer. Nothing in it knows it is
being trained: `tracerl train gateway_agent` points `base_url` at the in-process gateway and names
the episode in a header, which any OpenAI-compatible client can send.

    python examples/gateway_agent/agent.py --base-url http://127.0.0.1:8000/v1 "Ann has 3 coins. ..."
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
from fractions import Fraction

import openai

INSTRUCTIONS = "Use the calculator tool to compute. Give the number in <answer></answer>."
TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression (+ - * / and parentheses).",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculator(expression: str) -> str:
    """The exact value of an expression over + - * / ( ), as an integer or p/q; `error: ...` otherwise."""
    def ev(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError("only integers, + - * / and parentheses")
    try:
        if len(expression) > 200:
            raise ValueError("expression too long")
        v = ev(ast.parse(expression.strip(), mode="eval").body)
    except (ValueError, SyntaxError, ZeroDivisionError, RecursionError) as err:
        return f"error: {err}"
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def run_episode(base_url: str, model: str, question: str, episode_id: str | None = None, *,
                max_turns: int = 3, client: openai.OpenAI | None = None) -> str:
    """Solve one question; returns the model's final text (the caller scores it)."""
    headers = {"X-Episode-Id": episode_id} if episode_id else {}
    own = client is None
    client = client or openai.OpenAI(base_url=base_url, api_key="not-needed", max_retries=0, timeout=120)
    messages = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": question}]
    try:
        text = ""
        for _ in range(max_turns):
            reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, extra_headers=headers)
            msg = reply.choices[0].message
            text = msg.content or ""
            if not msg.tool_calls:
                return text
            messages.append(msg.model_dump(exclude_none=True))
            for call in msg.tool_calls:
                try:
                    result = calculator(json.loads(call.function.arguments).get("expression", ""))
                except (json.JSONDecodeError, AttributeError):
                    result = "error: arguments must be a JSON object with an expression"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return text
    finally:
        if own:
            client.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("question")
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", default="tracerl")
    args = ap.parse_args()
    print(run_episode(args.base_url, args.model, args.question))
