"""Errors for people: one sentence naming the problem and the fix, shown without a traceback."""


class UserError(Exception):
    """Bad input from a user (config, task file, path, override). The CLI exits with code 2."""
