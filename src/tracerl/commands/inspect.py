"""`tracerl inspect RUN_DIR [--step N] [--trajectory ID] [--logprobs]`: trajectories in the terminal.

Tokens are coloured by role (prompt, action, observation, template), so what the policy wrote is
told apart from what it was shown at a glance; without colour (`--color never`, a pipe, a file)
each run of tokens of one role opens with a text marker instead (`⟦action⟧`, `⟦observation⟧`, ...).
The header shows the advantage and loss weight the learner gave the trajectory (when it reached an
update); `--logprobs` annotates every action token with its behavior log-probability, the policy
version that sampled it and its advantage. Text is decoded with the run's tokenizer
(RUN_DIR/tokenizer, else the latest checkpoint's); without one, token ids are shown.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

from tracerl.errors import UserError

ROLE_STYLE = {"prompt": "cyan", "action": "bold green", "observation": "yellow", "template": "magenta", "pad": "dim"}


def register(sub) -> None:
    p = sub.add_parser("inspect", help="show a run's trajectories with token roles coloured")
    p.add_argument("run_dir")
    p.add_argument("--stage", default=None, help="stage to read (default: the stage of the latest step)")
    p.add_argument("--step", type=int, default=None, help="step to show (default: the latest)")
    p.add_argument("--trajectory", default=None, help="one trajectory id (overrides --stage/--step)")
    p.add_argument("--logprobs", action="store_true",
                   help="show each action token with its behavior log-probability, policy version and advantage")
    p.add_argument("--failures", action="store_true", help="only episodes that were not correct")
    p.add_argument("--truncated", action="store_true", help="only truncated episodes")
    p.add_argument("--tool-errors", action="store_true", help="only episodes with a tool call whose status is not ok")
    p.add_argument("--limit", type=int, default=4, help="at most this many trajectories (default 4; 0 = all)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    p.set_defaults(func=run)


def _latest(store_path: Path, stage: str | None) -> tuple[str, int] | None:
    db = sqlite3.connect(f"{store_path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        sql, args = "SELECT stage, step FROM trajectories", []
        if stage is not None:
            sql, args = sql + " WHERE stage = ?", [stage]
        row = db.execute(sql + " ORDER BY rowid DESC LIMIT 1", args).fetchone()
    finally:
        db.close()
    return (row[0], int(row[1])) if row else None


def load_tokenizer(run_path: Path):
    candidates = [run_path / "tokenizer"] + sorted(run_path.glob("checkpoints/step_*"), key=lambda p: -int(p.name.split("_")[1]))
    for path in candidates:
        if (path / "tokenizer_config.json").exists():
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(path, local_files_only=True)
    return None


def _piece(tokenizer, ids: list[int]) -> str:
    if tokenizer is None:
        return "[" + " ".join(map(str, ids)) + "]"
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _token_advantage(credit: dict | None, k: int, action_index: int) -> float | None:
    if not credit:
        return None
    adv = credit.get("advantage")
    if isinstance(adv, list):  # token-level estimators store one value per action token
        return adv[action_index] if action_index < len(adv) else None
    return adv


def render_trajectory(traj, tokenizer, *, logprobs: bool, where: str = "", credit: dict | None = None,
                      markers: bool = False):
    """A rich renderable: header (reward, ending, provenance, credit), role-marked tokens, tool spans."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    from tracerl.contract import TokenRole, is_success

    comps = ", ".join(f"{k}={v:g}×{traj.reward_weights.get(k, 0):g}" for k, v in traj.reward_components.items())
    versions = sorted({v for v in traj.policy_versions if v >= 0})
    reason = traj.terminal_reason.value if traj.terminal_reason else "none"
    head = Text()
    head.append(f"reward {traj.reward:g}", style="bold")
    head.append(f" ({comps})  " if comps else "  ")
    head.append("correct" if is_success(traj) else "not correct", style="green" if is_success(traj) else "red")
    head.append(f"  ending {reason}" + ("  TRUNCATED" if traj.truncated else ""), style="bold red" if traj.truncated or reason == "infra_failure" else "")
    head.append(f"\ntask {traj.task_id}  group {traj.group_id}  env {traj.env_name} {traj.env_revision}  "
                f"tokens {len(traj)} ({traj.num_action_tokens} action)  policy versions {versions or '-'}"
                f"  verifier {traj.verifier_name or '-'} {traj.verifier_revision}")
    if credit:
        adv = credit["advantage"]
        shown = f"{adv:+.4g}" if not isinstance(adv, list) else f"per token (mean {sum(adv) / max(len(adv), 1):+.4g})"
        head.append(f"\nadvantage {shown}  loss weight {credit['loss_weight']:g}  (update at step {credit['update_step']})")
    else:
        head.append("\nadvantage -  loss weight -  (no update used this episode)", style="dim")
    body = Text()
    action_index = 0
    i, n = 0, len(traj)
    while i < n:
        role = TokenRole(traj.roles[i])
        j = i
        while j < n and traj.roles[j] == role:
            j += 1
        style = ROLE_STYLE[role.label]
        if markers:
            body.append(f"⟦{role.label}⟧", style="dim")
        if logprobs and role == TokenRole.ACTION:
            for k in range(i, j):
                body.append(_piece(tokenizer, [traj.token_ids[k]]), style=style)
                lp, adv = traj.behavior_logprobs[k], _token_advantage(credit, k, action_index)
                note = f"{lp:.2f}" if not math.isnan(lp) else "nan"
                note += f" v{traj.policy_versions[k]}" + (f" A{adv:+.2f}" if adv is not None else "")
                body.append(f"⟨{note}⟩", style="dim")
                action_index += 1
        else:
            body.append(_piece(tokenizer, traj.token_ids[i:j]), style=style)
            if role == TokenRole.ACTION:
                action_index += j - i
        i = j
    lines = [head, Text(""), body]
    tools = [s for s in traj.spans if s.tool_status is not None or s.tool_name]
    if tools:
        lines.append(Text(""))
        for s in tools:
            bad = s.tool_status not in (None, "ok")
            latency = f" {s.tool_latency_s:.3f}s" if s.tool_latency_s is not None else ""
            lines.append(Text(f"tool {s.tool_name or '-'} [{s.start}:{s.end}) status {s.tool_status}{latency}",
                              style="red" if bad else "dim"))
    if traj.verifier_output:
        lines.append(Text("verifier " + json.dumps(traj.verifier_output, default=str)[:300], style="dim"))
    return Panel(Group(*lines), title=f"{traj.trajectory_id}{where}", title_align="left")


def legend(markers: bool = False):
    from rich.text import Text

    t = Text("roles: ")
    for label, style in ROLE_STYLE.items():
        if label != "pad":
            t.append(f"⟦{label}⟧" if markers else label, style=style)
            t.append("  ")
    if markers:
        t.append("(no colour: each run of tokens of one role starts with its marker)")
    return t


def run(args) -> int:
    from rich.console import Console

    from tracerl.store.sqlite import Store
    from tracerl.contract import is_success

    run_path = Path(args.run_dir)
    store_path = run_path / "store.sqlite"
    if not store_path.exists():
        raise UserError(f"{run_path} has no store.sqlite; pass a run directory that `tracerl train` wrote")
    stage, step = args.stage, args.step
    if args.trajectory is None and step is None:
        latest = _latest(store_path, stage)
        if latest is None:
            raise UserError(f"no trajectories stored in {run_path}" + (f" for stage {stage!r}" if stage else ""))
        stage, step = latest
    from tracerl.store.credit import read_credit

    with Store(store_path) as store:
        credit = read_credit(store)
        trajs = list(store.trajectories(trajectory_id=args.trajectory) if args.trajectory
                     else store.trajectories(stage=stage, step=step))
    if not trajs:
        what = f"trajectory {args.trajectory!r}" if args.trajectory else f"trajectories at step {step}" + (f" of stage {stage!r}" if stage else "")
        raise UserError(f"no {what} in {run_path}; `tracerl export {run_path}` lists what is stored")
    total = len(trajs)
    if args.failures:
        trajs = [t for t in trajs if not is_success(t)]
    if args.truncated:
        trajs = [t for t in trajs if t.truncated]
    if args.tool_errors:
        trajs = [t for t in trajs if any(s.tool_status not in (None, "ok") for s in t.spans)]
    shown = trajs[: args.limit] if args.limit > 0 else trajs
    console = Console(force_terminal={"always": True, "never": False}.get(args.color),
                      no_color=args.color == "never", width=120, highlight=False)
    tokenizer = load_tokenizer(run_path)
    where = f"step {step}" + (f", stage {stage}" if stage else "") if args.trajectory is None else f"trajectory {args.trajectory}"
    console.print(f"{run_path.name}: {where}: showing {len(shown)} of {len(trajs)} matching ({total} stored)"
                  + ("" if tokenizer else "; no tokenizer found, showing token ids"))
    markers = console.no_color or console.color_system is None
    console.print(legend(markers))
    for t in shown:
        console.print(render_trajectory(t, tokenizer, logprobs=args.logprobs, credit=credit.get(t.trajectory_id),
                                        markers=markers))
    return 0
