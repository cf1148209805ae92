"""`math_tool`: arithmetic word problems with a Python tool."""

from tracerl.envs import _audit
from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.math_tool.audit import audit_cases
from tracerl.envs.math_tool.env import REVISION, VERIFIER, MathToolEnv, check_answer, expert
from tracerl.envs.math_tool.generator import generate

SPEC = register_env(EnvSpec(
    name="math_tool",
    revision=REVISION,
    make=MathToolEnv,
    generate=generate,
    expert=expert,
    reward_weights={"correct": 1.0, "format": 0.0},
    stop_strings=("</code>", "</answer>"),
    verifier=VERIFIER,
    special_tokens=("<code>", "</code>", "<answer>", "</answer>", "<output>", "</output>"),
    tools=("python",),
    description="Arithmetic word problems (1-4 operations) with a sandboxed Python tool.",
))

audit = _audit.register(SPEC, audit_cases)  # `tracerl audit math_tool`: (verifier, cases)

__all__ = ["SPEC", "audit_cases", "MathToolEnv", "check_answer", "expert", "generate"]

from tracerl.envs.math_tool.native import native_spec as _native_spec  # noqa: E402
from tracerl.envs.native_tools import register_native  # noqa: E402

register_native("math_tool", _native_spec)  # env.tool_format: native (envs/math_tool/native.py)
