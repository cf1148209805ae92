"""Subcommands of `tracerl`; each module exposes `register(subparsers)` (see tracerl.cli)."""
