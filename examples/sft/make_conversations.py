"""Regenerate math_tool_conversations.jsonl: the math_tool expert's demonstrations, played
through the real environment (so every tool message is what the sandbox returned), written as
OpenAI-style `messages` conversations for `sft.data`.

    .venv/bin/python examples/sft/make_conversations.py [N]
"""

import sys
from pathlib import Path

from tracerl.envs import get_env
from tracerl.train.demos import collect_demos
from tracerl.train.sft_data import write_conversations

n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
spec = get_env("math_tool")
tasks = spec.generate("train", n, 12345, (0.0, 1.0))  # seed 12345: not the default recipe's train split
demos = collect_demos(spec, tasks, seed=12345, max_turns=3, expert_kwargs={"tool_rate": 0.4})
out = Path(__file__).with_name("math_tool_conversations.jsonl")
print(f"wrote {write_conversations(out, demos)} conversations to {out}")
