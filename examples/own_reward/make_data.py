"""Write arith.jsonl (prompts + answers, 20% held out by content) and demos.jsonl (SFT conversations).

    python make_data.py        # deterministic: the shipped files are its output

Rows: "What is a + b?" for a, b in 0..19 (400 rows); a row is held out when (7a + b) % 5 == 0, so no
held-out sum is ever trained on. The demonstrations answer 240 of the training rows, half of
them in a sentence ("The answer is 19.") instead of the bare number the reward asks for: SFT gets the tiny
model off the ground with both habits, and RL on `correct` (exact match) keeps the one that is paid.
"""

import json
import random
from pathlib import Path

here = Path(__file__).parent
rng = random.Random(0)
rows = [{"id": f"add-{a}-{b}", "prompt": f"What is {a} + {b}?", "answer": str(a + b),
         "split": "heldout" if (7 * a + b) % 5 == 0 else "train", "level": "easy" if a + b < 20 else "hard"}
        for a in range(20) for b in range(20)]
(here / "arith.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
train = [r for r in rows if r["split"] == "train"]
demos = []
for r in rng.sample(train, 240):
    reply = f"The answer is {r['answer']}." if rng.random() < 0.5 else r["answer"]
    demos.append({"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": reply + "\n"}]})
(here / "demos.jsonl").write_text("".join(json.dumps(d) + "\n" for d in demos))
print(f"{len(rows)} rows ({len(rows) - len(train)} held out), {len(demos)} demonstrations")
