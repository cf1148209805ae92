"""Why on-policy distillation moves a text_world student where it does: three measurements on stored rollouts.

    python benchmarks/distill_anatomy.py tokens  RUN STEP STUDENT TEACHER [--stage rl]
    python benchmarks/distill_anatomy.py actions RUN STEP MODEL... [--stage eval/<protocol>] [--limit 100]
    python benchmarks/distill_anatomy.py interference RUN STUDENT TEACHER --heldout EVAL_RUN [--until-error]

`tokens`: per action-token class (the `<action>` tag, the first token of each action, the rest of the
content, the closing tag) the student's advantage log π_T − log π_behaviour, the exact full-vocabulary
reverse and forward KL between the two models, argmax agreement and both entropies.
`actions`: replays each stored text_world episode and, before every turn, scores every action the grammar can
express under each MODEL (teacher-forced): the mass on grammatical, valid and shortest-plan actions, the
argmax's validity, and the plan action's probability on the first turn (the one every episode shares).
`interference`: the gradient of the whole batch's forward KL (teacher ‖ student, every action token of the
RL step-0 rollouts) against the gradient of its first-turn part; then one Adam-sized step (lr·sign(g)) on
it, and both KLs before and after on the held-out episodes of EVAL_RUN. `--until-error` keeps only the
turns up to each episode's first failed action, as `rl.algorithm.until_error` does.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json

import torch

from tracerl.contract.roles import TokenRole
from tracerl.envs.grammar import parse_tagged
from tracerl.envs.text_world import generate
from tracerl.envs.text_world.world import apply, candidate_actions, plan
from tracerl.models.load import load_model_and_tokenizer
from tracerl.store.sqlite import Store


def _trajs(run: str, stage: str, step: int, limit: int | None = None):
    out = list(Store(f"{run}/store.sqlite").trajectories(stage=stage, step=step))
    return out[:limit] if limit else out


def _models(paths):
    loaded = [load_model_and_tokenizer(p) for p in paths]
    for m, _ in loaded:
        m.eval()
    return [m for m, _ in loaded], loaded[0][1]


def _logp(model, ids: list[int]) -> torch.Tensor:
    return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)


def _turns(traj) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in traj.spans if s.kind == "action"]


def _until_error(traj) -> int:
    """First token index after the turn whose observation failed (len when none did)."""
    bad = [s.start for s in traj.spans if s.kind == "observation" and s.tool_status not in (None, "ok")]
    return min(bad) if bad else len(traj.token_ids)


def tokens(a) -> None:
    (S, T), tok = _models([a.student, a.teacher])
    acc = collections.defaultdict(lambda: collections.defaultdict(float))
    for tr in _trajs(a.run, a.stage, a.step):
        with torch.no_grad():
            ls, lt = _logp(S, tr.token_ids), _logp(T, tr.token_ids)
        for start, end in _turns(tr):
            for i in range(start, end):
                k, text = i - start, tok.decode([tr.token_ids[i]])
                cls = "<action> tag" if k == 0 and "action" in text else ("closing tag" if "action" in text else
                                                                         ("first word" if k == 1 else "rest of the action"))
                ps, pt, tid = ls[i - 1], lt[i - 1], tr.token_ids[i]
                row = {"adv": float(pt[tid]) - tr.behavior_logprobs[i], "rev_kl": float((ps.exp() * (ps - pt)).sum()),
                       "fwd_kl": float((pt.exp() * (pt - ps)).sum()), "argmax_agree": float(ps.argmax() == pt.argmax()),
                       "H_student": float(-(ps.exp() * ps).sum()), "H_teacher": float(-(pt.exp() * pt).sum())}
                for c in (cls, "all"):
                    acc[c]["n"] += 1
                    for key, v in row.items():
                        acc[c][key] += v
    cols = ["adv", "rev_kl", "fwd_kl", "argmax_agree", "H_student", "H_teacher"]
    print(f"{'token class':<20} {'n':>6} " + " ".join(f"{c:>12}" for c in cols))
    for c, d in sorted(acc.items(), key=lambda kv: -kv[1]["n"]):
        print(f"{c:<20} {int(d['n']):>6} " + " ".join(f"{d[k] / d['n']:>12.3f}" for k in cols))


def _tasks():
    return {t.id: t for split, n in (("train", 3000), ("heldout", 200)) for t in generate(split, n, seed=0)}


def actions(a) -> None:
    models, tok = _models(a.models)
    tasks, trajs = _tasks(), _trajs(a.run, a.stage, a.step, a.limit)
    acc = [collections.defaultdict(float) for _ in models]
    n_turns = n_first = 0
    for tr in trajs:
        world = tasks[tr.task_id].metadata["world"]
        state = json.loads(json.dumps(world["state"]))
        for t_idx, (start, end) in enumerate(_turns(tr)):
            cands = candidate_actions(world, state)
            valid = [c for c in cands if apply(world, state, c)[0] is not None]
            best = plan(world, state)[0]
            seqs = [tok.encode(f"<action>{c}</action>", add_special_tokens=False) for c in cands]
            width = max(map(len, seqs))
            ids = torch.zeros((len(cands), start + width), dtype=torch.long)
            for k, s in enumerate(seqs):
                ids[k, :start] = torch.tensor(tr.token_ids[:start])
                ids[k, start:start + len(s)] = torch.tensor(s)
            for g, m in zip(acc, models):
                with torch.no_grad():
                    lp = torch.log_softmax(m(ids).logits.float(), -1)
                p = torch.stack([lp[k, start - 1 + torch.arange(len(s)), torch.tensor(s)].sum() for k, s in enumerate(seqs)]).exp()
                top = cands[int(p.argmax())]
                g["grammar_mass"] += float(p.sum())
                g["valid_mass"] += float(sum(p[cands.index(c)] for c in valid))
                g["plan_mass"] += float(p[cands.index(best)])
                g["argmax_valid"] += float(top in valid)
                g["first_turn_plan"] += float(p[cands.index(best)]) if t_idx == 0 else 0.0
            n_turns += 1
            n_first += t_idx == 0
            act = parse_tagged(tok.decode(tr.token_ids[start:end]), ("action",))
            nxt = apply(world, state, act.body)[0] if act.kind != "invalid" else None
            state = nxt if nxt is not None else state
    print(f"{len(trajs)} episodes, {n_turns} turns of {a.run} ({a.stage}, step {a.step})")
    for path, g in zip(a.models, acc):
        print(f"{path}: " + " ".join(f"{k} {v / (n_first if k == 'first_turn_plan' else n_turns):.3f}" for k, v in g.items()))


def _kl_data(T, trajs, until_error: bool):
    data = []
    for tr in trajs:
        with torch.no_grad():
            lt = _logp(T, tr.token_ids)
        stop = _until_error(tr) if until_error else len(tr.token_ids)
        turns = _turns(tr)
        act = [i for s, e in turns for i in range(s, e) if i < stop]
        first = set(range(*turns[0])) if turns else set()
        data.append((tr.token_ids, lt, act, first))
    return data


def _fwd_kl(model, data):
    tot, ft, n, nf = 0.0, 0.0, 0, 0
    for ids, lt, act, first in data:
        ls = _logp(model, ids)
        for i in act:
            kl = (lt[i - 1].exp() * (lt[i - 1] - ls[i - 1])).sum()
            tot, n = tot + kl, n + 1
            if i in first:
                ft, nf = ft + kl, nf + 1
    return tot / max(n, 1), ft / max(nf, 1), n


def interference(a) -> None:
    (S, T), _ = _models([a.student, a.teacher])
    train = _kl_data(T, _trajs(a.run, "rl", 0), a.until_error)
    held = _kl_data(T, _trajs(a.heldout, a.heldout_stage, 0, 100), False)
    params = list(S.parameters())
    whole, first, n = _fwd_kl(S, train)
    g_all = torch.autograd.grad(whole, params, retain_graph=True)
    g_first = torch.autograd.grad(first, params)
    fa, ff = (torch.cat([g.flatten() for g in gs]) for gs in (g_all, g_first))
    print(f"training positions {n}; forward KL: all {float(whole.detach()):.4f}, first turn {float(first.detach()):.4f}; "
          f"cosine(gradient of all, of first turn) {float(fa @ ff / (fa.norm() * ff.norm())):.3f}")
    with torch.no_grad():
        h_all, h_first, _ = _fwd_kl(S, held)
        print(f"held-out before: all {float(h_all):.4f}, first turn {float(h_first):.4f}")
        for lr in a.lr:
            M = copy.deepcopy(S)
            for p, g in zip(M.parameters(), g_all):
                p -= lr * torch.sign(g)  # Adam's first step, bias-corrected, is lr·sign(g)
            h_all, h_first, _ = _fwd_kl(M, held)
            print(f"after lr·sign(g), lr {lr:g}: held-out all {float(h_all):.4f}, first turn {float(h_first):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens")
    t.add_argument("run"), t.add_argument("step", type=int), t.add_argument("student"), t.add_argument("teacher")
    t.add_argument("--stage", default="rl")
    c = sub.add_parser("actions")
    c.add_argument("run"), c.add_argument("step", type=int), c.add_argument("models", nargs="+")
    c.add_argument("--stage", default="rl"), c.add_argument("--limit", type=int, default=None)
    i = sub.add_parser("interference")
    i.add_argument("run"), i.add_argument("student"), i.add_argument("teacher")
    i.add_argument("--heldout", required=True, help="a run whose held-out episodes (step 0) are the test states")
    i.add_argument("--heldout-stage", default=None, help="its eval stage (default: the one stage it has)")
    i.add_argument("--until-error", action="store_true"), i.add_argument("--lr", type=float, nargs="+", default=[1.7e-4, 5e-4])
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.cmd == "interference" and a.heldout_stage is None:
        a.heldout_stage = sorted(s for s, _, _ in _stages(a.heldout) if s.startswith("eval"))[0]
    {"tokens": tokens, "actions": actions, "interference": interference}[a.cmd](a)


def _stages(run: str):
    import sqlite3
    with sqlite3.connect(f"{run}/store.sqlite") as db:
        return db.execute("SELECT stage, step, COUNT(*) FROM trajectories GROUP BY stage, step").fetchall()


if __name__ == "__main__":
    main()
