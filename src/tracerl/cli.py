"""The `tracerl` command.

Each subcommand lives in its own module under `tracerl.commands` and exposes
`register(subparsers)`, which adds a parser whose `func(args) -> int` runs it. Modules are
discovered by name, so adding a command never edits this file.

Errors meant for people (`UserError`) print one sentence and exit with code 2, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from tracerl.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    import tracerl.commands as commands

    parser = argparse.ArgumentParser(
        prog="tracerl",
        description="Agentic RL for language models: train, evaluate, inspect and audit.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"tracerl.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from tracerl.telemetry.gates import GateTripped

    try:
        return int(args.func(args) or 0)
    except GateTripped as err:
        print(f"tracerl: stopped by a gate: {err}; the checkpoint and gate event are saved in the run directory",
              file=sys.stderr)
        return err.exit_code
    except UserError as err:
        print(f"tracerl: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `tracerl export RUN | head`: the reader left; not an error
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("tracerl: interrupted; what was already written is kept.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
