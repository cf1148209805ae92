"""The `tracerl` command.

Each subcommand lives in its own module under `tracerl.commands` and exposes
`register(subparsers)`, which adds a parser whose `func(args) -> int` runs it. Modules are
discovered by name, so adding a command never edits this file.

`--import MODULE` (repeatable, anywhere on the line) imports a module of yours first, so the
environments, rewards or algorithms it registers are known to the command:
`tracerl train --import my_envs env.name=mine`. A module name is looked up on `sys.path` with the
current directory first; a path ending in `.py` is loaded from that file.

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
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                        help="import MODULE (a name on sys.path or a .py file) first, e.g. to register an "
                        "environment; may be repeated and given anywhere on the line")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"tracerl.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def split_imports(argv: list[str]) -> tuple[list[str], list[str]]:
    """(modules named by `--import M` / `--import=M` anywhere in argv, the rest of argv)."""
    modules, rest, i = [], [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--import":
            if i + 1 >= len(argv):
                raise UserError("--import needs a module name or a .py path, e.g. --import my_envs")
            modules.append(argv[i + 1])
            i += 2
            continue
        if a.startswith("--import="):
            modules.append(a.split("=", 1)[1])
        else:
            rest.append(a)
        i += 1
    return modules, rest


def import_user_module(name: str) -> None:
    """Import `name` (dotted module on sys.path, current directory first) or load a .py file."""
    import importlib.util
    import os

    try:
        if name.endswith(".py"):
            if not os.path.isfile(name):
                raise UserError(f"--import {name}: no such file; give an existing .py path or a module name")
            mod_name = os.path.splitext(os.path.basename(name))[0]
            spec = importlib.util.spec_from_file_location(mod_name, name)
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
            return
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        importlib.import_module(name)
    except UserError:
        raise
    except ModuleNotFoundError as err:
        if err.name and name.split(".")[0] == err.name.split(".")[0]:
            raise UserError(f"--import {name}: no module named {name!r} on the Python path; run from the folder "
                            "that holds it, add that folder to PYTHONPATH, or pass the .py file") from None
        raise UserError(f"--import {name}: it imports {err.name!r}, which is not installed") from None
    except Exception as err:
        raise UserError(f"--import {name} failed while running the module ({type(err).__name__}: {err}); "
                        "fix the module and run again") from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        modules, rest = split_imports(list(sys.argv[1:] if argv is None else argv))
        for name in modules:
            import_user_module(name)
    except UserError as err:
        print(f"tracerl: error: {err}", file=sys.stderr)
        return 2
    args = parser.parse_args(rest)
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
