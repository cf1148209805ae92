"""Procedural office tasks: a small random database and a request whose effect is known exactly.

Names come from a fixed pool of 24 made-up words (a tiny tokenizer keeps each whole); who is on
which team and owns which ticket is drawn afresh per task."""

from __future__ import annotations

import random

from tracerl.envs.workplace_db import db

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
TOPICS = ("printer", "laptop", "badge", "wifi", "payroll", "desk", "phone", "email")
LEVELS = (0, 1, 2, 3)


def _pool(n: int) -> tuple[str, ...]:
    rng, out = random.Random("workplace_db-names"), []
    while len(out) < n:
        name = "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(2))
        if name not in out:
            out.append(name)
    return tuple(out)


NAMES = _pool(24)


def make_task(rng: random.Random, level: int) -> dict:
    """Returns prompt, rows, the reference calls (`script`) and a wrong shortcut call."""
    names = rng.sample(NAMES, 5)
    n_emp = 4
    employees = [{"id": i + 1, "name": names[i], "team": rng.choice(db.TEAMS)} for i in range(n_emp)]
    topics = rng.sample(TOPICS, 4)
    tickets = [{"id": i + 1, "topic": t, "owner": rng.randint(1, n_emp), "status": "open"}
               for i, t in enumerate(topics)]
    rows = {"employees": employees, "tickets": tickets}
    emp = rng.choice(employees)
    tic = rng.choice(tickets)
    wrong_emp = rng.choice([e for e in employees if e["id"] != emp["id"]])
    wrong_tic = rng.choice([t for t in tickets if t["id"] != tic["id"]])
    if level == 0:
        prompt = f"close ticket {tic['id']}."
        script = [f"set tickets id {tic['id']} status closed"]
        shortcut = f"set tickets id {wrong_tic['id']} status closed"
    elif level == 1:
        team = rng.choice([t for t in db.TEAMS if t != emp["team"]])
        prompt = f"move {emp['name']} to team {team}."
        script = [f"find employees name {emp['name']}", f"set employees id {emp['id']} team {team}"]
        shortcut = f"set employees id {wrong_emp['id']} team {team}"
    elif level == 2:
        emp = rng.choice([e for e in employees if e["id"] != tic["owner"]])
        wrong_emp = rng.choice([e for e in employees if e["id"] not in (emp["id"], tic["owner"])])
        prompt = f"give the {tic['topic']} ticket to {emp['name']}."
        script = [f"find employees name {emp['name']}", f"find tickets topic {tic['topic']}",
                  f"set tickets id {tic['id']} owner {emp['id']}"]
        shortcut = f"set tickets id {tic['id']} owner {wrong_emp['id']}"
    else:
        team = rng.choice(db.TEAMS)
        new = names[4]
        prompt = f"add {new} to team {team} and give them the {tic['topic']} ticket."
        script = [f"add employees name {new} team {team}", f"find tickets topic {tic['topic']}",
                  f"set tickets id {tic['id']} owner {n_emp + 1}"]
        shortcut = f"set tickets id {wrong_tic['id']} owner {wrong_emp['id']}"
    script.append("done")
    conn = db.connect(rows)
    op, table, args = db.parse(script[0])
    first = f"<result>{db.execute(conn, op, table, args)}</result>\n"
    return {"prompt": prompt, "rows": rows, "script": script, "shortcut": shortcut, "first_result": first}
