"""Write mult.jsonl (two-digit products, 20% held out) and demos_tools.jsonl (SFT conversations that call
the `multiply` tool of tools.py, OpenAI `tool_calls` rows) for recipe_tools.yaml.

    python make_tools_data.py        # deterministic: the shipped files are its output

Rows: "What is a * b?" for a in 11..49, b in 11..19 (351 rows); a row is held out when (3a + b) % 5 == 0.
The tiny model cannot multiply two-digit numbers in its head; it can learn to copy them into a call and
copy the result back, which is what the demonstrations (every training row, 280) show.
"""

import json
import random
from pathlib import Path

here = Path(__file__).parent
rng = random.Random(0)
rows = [{"id": f"mul-{a}-{b}", "prompt": f"What is {a} * {b}?", "answer": str(a * b),
         "split": "heldout" if (3 * a + b) % 5 == 0 else "train"} for a in range(11, 50) for b in range(11, 20)]
(here / "mult.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
train = [r for r in rows if r["split"] == "train"]
demos = []
for r in rng.sample(train, len(train)):
    a, b = (int(x) for x in r["id"].split("-")[1:])
    call = {"type": "function", "function": {"name": "multiply", "arguments": json.dumps({"a": a, "b": b})}}
    demos.append({"messages": [{"role": "user", "content": r["prompt"]},
                               {"role": "assistant", "content": None, "tool_calls": [call]},
                               {"role": "tool", "content": r["answer"]},
                               {"role": "assistant", "content": r["answer"]}]})
(here / "demos_tools.jsonl").write_text("".join(json.dumps(d) + "\n" for d in demos))
print(f"{len(rows)} rows ({len(rows) - len(train)} held out), {len(demos)} demonstrations")
