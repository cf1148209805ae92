import re

def correct(completions, answer, **kwargs):
    """1.0 when the completion is exactly the answer, else 0.0 (TRL-style: one value per row)."""
    return [float(c.strip() == str(a)) for c, a in zip(completions, answer)]


def last_number(completions, answer, **kwargs):
    """1.0 when the last integer the completion writes is the answer (a chat model says "2 + 3 = 5.")."""
    return [float((re.findall(r"-?\d+", c) or [None])[-1] == str(a)) for c, a in zip(completions, answer)]


def final_answer(completions, answer, **kwargs):
    """With reward.tools, each completion is the episode's messages: 1.0 when the last one (the answer) is exact."""
    return [float(c[-1]["content"].strip() == str(a)) for c, a in zip(completions, answer)]
