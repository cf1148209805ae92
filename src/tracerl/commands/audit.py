"""`tracerl audit VERIFIER_OR_ENV`: run a verifier's adversarial and known-good sets.

Reports accepted adversarial outputs (false positives: reward hacks that would be trained on)
and rejected good outputs (false negatives). Exit code 1 when there is any of either.
"""

from __future__ import annotations

import argparse
import importlib
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="run a verifier's (or environment's) adversarial and known-good outputs; report false positives",
        description="Run the audit set registered under NAME (a built-in verifier, an environment that "
                    "registered one, or module:attribute naming a verifier or a builder) and report "
                    "accepted adversarial outputs and rejected good ones. Exits 1 on any.",
    )
    parser.add_argument("name", metavar="VERIFIER_OR_ENV", nargs="?",
                        help="audit name (see --list), or module:attribute")
    parser.add_argument("--list", action="store_true", help="list the registered audit names")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def _discover() -> None:
    """Environments register their audits when their modules load; load them if that package
    exists (its `env_names()` imports the built-in environments)."""
    try:
        envs = importlib.import_module("tracerl.envs")
    except ImportError:
        return
    load_all = getattr(envs, "env_names", None)
    if callable(load_all):
        load_all()


def _resolve(name: str):
    from tracerl.errors import UserError
    from tracerl.verifiers.audit import audit_names, get_audit

    if ":" in name:
        module_name, attr = name.split(":", 1)
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise UserError(f"cannot load {name!r} ({exc}); give module:attribute of a verifier or a builder") from None
        if isinstance(target, type):
            target = target()
        if hasattr(target, "verify") and hasattr(target, "audit_cases"):
            return target, target.audit_cases()
        verifier, cases = target()
        return verifier, cases
    if name not in audit_names():
        _discover()
    return get_audit(name)


def run(args: argparse.Namespace) -> int:
    from tracerl.errors import UserError
    from tracerl.verifiers.audit import audit_names, run_audit_and_close

    if args.list or not args.name:
        _discover()
        names = audit_names()
        print(json.dumps(names) if args.json else "\n".join(names))
        return 0 if args.list else 2
    verifier, cases = _resolve(args.name)
    if not cases:
        raise UserError(f"the audit set of {args.name!r} is empty; an audit needs adversarial and good outputs")
    report = run_audit_and_close(verifier, cases)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print(report)
    return 0 if report.ok else 1


def _print(report) -> None:
    d = report.to_dict()
    print(f"audit of {d['verifier']} (revision {d['revision']}): {d['adversarial']} adversarial, {d['good']} good")
    for o in report.outcomes:
        if o.should_reward:
            verdict = "ok  " if o.rewarded else "FN  "
            what = "known good"
        else:
            verdict = "FP  " if o.rewarded else "ok  "
            what = o.attack or "adversarial"
        reason = o.reason or ("rewarded" if o.rewarded else "")
        print(f"  {verdict}{o.name:<26} {what[:60]:<60} {reason[:90]}")
    print(f"false positives (adversarial rewarded): {d['false_positives']}")
    print(f"false negatives (good not rewarded):    {d['false_negatives']}")
