"""A test agent whose calls are seeded (per episode, from its group and row: the same in every run), and whose
answer depends on the tokens it was served: right (from the task file `TRACERL_TEST_ANSWERS` names) when the
sum of the sampled token ids is even, the model's own text otherwise. So a run's rewards vary within groups (the
learner takes optimizer steps) and are a function of the served tokens alone."""

from __future__ import annotations

import json
import os
import zlib

import openai

STOPS = list(range(0, 512, 8))  # a stop token every 8 ids (64, the most a call may name): most samples stop within a few tokens


def run_episode(base_url: str, model: str, question: str, episode_id: str) -> str:
    answers = json.loads(open(os.environ["TRACERL_TEST_ANSWERS"]).read())
    seed = zlib.crc32(episode_id.rsplit(".", 1)[0].encode())  # "s3-p1.2.<uuid>": step, group, row; no uuid
    with openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=120) as client:
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}], seed=seed,
                                           max_tokens=32, extra_headers={"X-Episode-Id": episode_id},
                                           extra_body={"stop_token_ids": STOPS})  # ends early: not a truncation
    ids = r.choices[0].model_extra["token_ids"]
    return f"<answer>{answers[question]}</answer>" if sum(ids) % 2 == 0 else r.choices[0].message.content or ""
