"""What a constrained completion may spell: `tool_choice` and `response_format` as character automata.

A `Pattern` is a sequence of parts, each a small character automaton with an immutable state:
`Lit` (exact text), `OneOf` (one of a few strings: a tool name), `Json` (one JSON value; `object_only`
makes it an object), and `NoText` (any text that never contains a string: `tool_choice: "none"` bans
`<tool_call>`). `feed(state, text)` returns the state after `text` or None when the text leaves the
language; `closure(state)` is the shortest text that completes it, so a completion cut short by its
token budget is closed instead of left unparseable (serve/constrained.py).

The JSON automaton accepts the JSON a model writes in practice and refuses the rest: no whitespace
but one optional space after `:` and `,`; numbers `-?(0|[1-9]\\d*)(\\.\\d+)?` of at most 24 characters
(no exponent); strings with the JSON escapes. `json_schema` formats are refused (schemas.py).
"""

from __future__ import annotations

import dataclasses
import re

from tracerl.envs.json_tools import CALL_CLOSE, CALL_OPEN

_NUM_PREFIX = re.compile(r"-?((0|[1-9]\d*)(\.\d*)?)?")
_NUM_DONE = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?")
_LITERALS = ("true", "false", "null")
_HEX = set("0123456789abcdefABCDEF")


# JSON state: (stack, mode, buf, prev_space); stack: "o"/"a" per open container; mode names below.
def _json_start(object_only: bool):
    return ((), "start_obj" if object_only else "value", "", False)


def _after_value(stack):
    return (stack, "after" if stack else "done", "", False)


def _json_feed_char(st, c):  # noqa: C901 (one branch per mode reads best as one function)
    stack, mode, buf, sp = st
    if mode == "str" or mode == "key":
        if c == "\\":
            return (stack, mode + "_esc", "", False)
        if c == '"':
            return (stack, "colon", "", False) if mode == "key" else _after_value(stack)
        return st if c >= " " else None
    if mode in ("str_esc", "key_esc"):
        base = mode[:-4]
        if c == "u":
            return (stack, base + "_u", "", False)
        return (stack, base, "", False) if c in '"\\/bfnrt' else None
    if mode in ("str_u", "key_u"):
        if c not in _HEX:
            return None
        return (stack, mode[:-2], "", False) if len(buf) == 3 else (stack, mode, buf + c, False)
    if mode == "num":
        if _NUM_PREFIX.fullmatch(buf + c) and len(buf) < 24:
            return (stack, "num", buf + c, False)
        if not _NUM_DONE.fullmatch(buf):
            return None
        return _json_feed_char(_after_value(stack), c)
    if mode == "lit":
        return None if c != buf[0] else ((stack, "lit", buf[1:], False) if len(buf) > 1 else _after_value(stack))
    if c == " ":  # one space after ':' or ',' (the json.dumps spacing), nowhere else
        return (stack, mode, buf, True) if mode in ("value", "key_after_comma") and not sp else None
    if mode == "start_obj":
        return ((*stack, "o"), "key_or_end", "", False) if c == "{" else None
    if mode in ("value", "value_or_end"):
        if mode == "value_or_end" and c == "]":
            return _after_value(stack[:-1])
        if c == "{":
            return ((*stack, "o"), "key_or_end", "", False)
        if c == "[":
            return ((*stack, "a"), "value_or_end", "", False)
        if c == '"':
            return (stack, "str", "", False)
        if c == "-" or c.isdigit():
            return (stack, "num", c, False)
        for lit in _LITERALS:
            if c == lit[0]:
                return (stack, "lit", lit[1:], False)
        return None
    if mode == "key_or_end":
        if c == "}":
            return _after_value(stack[:-1])
        return (stack, "key", "", False) if c == '"' else None
    if mode == "key_after_comma":
        return (stack, "key", "", False) if c == '"' else None
    if mode == "colon":
        return (stack, "value", "", False) if c == ":" else None
    if mode == "after":
        top = stack[-1]
        if c == ",":
            return (stack, "key_after_comma" if top == "o" else "value", "", False)
        if c == ("}" if top == "o" else "]"):
            return _after_value(stack[:-1])
        return None
    return None  # done: nothing may follow the value


def _json_closure(st) -> str:
    out = []
    while st[1] != "done":
        stack, mode, buf, _ = st
        c = {"start_obj": "{", "value": "0", "value_or_end": "]", "key_or_end": "}", "key_after_comma": '"',
             "colon": ":", "str": '"', "key": '"', "str_esc": "n", "key_esc": "n", "str_u": "0", "key_u": "0"}.get(mode)
        if mode == "lit":
            c = buf[0]
        elif mode == "num":
            c = "0" if not _NUM_DONE.fullmatch(buf) else ("}" if stack and stack[-1] == "o" else "]")
            if not stack and _NUM_DONE.fullmatch(buf):
                return "".join(out)  # a bare number at the top ends with the text
        elif mode == "after":
            c = "}" if stack[-1] == "o" else "]"
        st = _json_feed_char(st, c)
        out.append(c)
    return "".join(out)


@dataclasses.dataclass(frozen=True)
class Lit:
    text: str

    def start(self):
        return 0

    def feed_char(self, pos, c):
        return pos + 1 if pos < len(self.text) and self.text[pos] == c else None

    def done(self, pos) -> bool:
        return pos == len(self.text)

    def closure(self, pos) -> str:
        return self.text[pos:]


@dataclasses.dataclass(frozen=True)
class OneOf:
    options: tuple[str, ...]

    def start(self):
        return ""

    def feed_char(self, got, c):
        got += c
        return got if any(o.startswith(got) for o in self.options) else None

    def done(self, got) -> bool:
        return got in self.options

    def closure(self, got) -> str:
        return min((o[len(got):] for o in self.options if o.startswith(got)), key=len)


@dataclasses.dataclass(frozen=True)
class Json:
    object_only: bool = True

    def start(self):
        return _json_start(self.object_only)

    def feed_char(self, st, c):
        return _json_feed_char(st, c)

    def done(self, st) -> bool:
        return st[1] == "done" or (st[1] == "num" and not st[0] and bool(_NUM_DONE.fullmatch(st[2])))

    def closure(self, st) -> str:
        return _json_closure(st)


@dataclasses.dataclass(frozen=True)
class NoText:
    """Any text that never contains `banned` (and may end anywhere)."""

    banned: str

    def start(self):
        return ""

    def feed_char(self, tail, c):
        tail = (tail + c)[-len(self.banned):]
        return None if tail == self.banned else tail

    def done(self, tail) -> bool:
        return True

    def closure(self, tail) -> str:
        return ""


@dataclasses.dataclass(frozen=True)
class Pattern:
    """Parts in order; a state is (part index, that part's state)."""

    parts: tuple
    name: str = ""

    def start(self):
        return (0, self.parts[0].start())

    def feed(self, state, text: str):
        i, st = state
        for c in text:
            while True:
                nxt = self.parts[i].feed_char(st, c) if i < len(self.parts) else None
                if nxt is not None:
                    st = nxt
                    break
                # the part cannot take c: if it is complete, c may begin the next part
                if i + 1 < len(self.parts) and self.parts[i].done(st):
                    i, st = i + 1, self.parts[i + 1].start()
                    continue
                return None
        return (i, st)

    @property
    def open_ended(self) -> bool:
        return isinstance(self.parts[-1], NoText)

    def literal_text(self) -> str:
        """Every literal of the pattern (a special token may be sampled only where a literal spells it)."""
        return "".join(p.text for p in self.parts if isinstance(p, Lit))

    def complete(self, state) -> bool:
        i, st = state
        return i == len(self.parts) - 1 and self.parts[i].done(st)

    def must_end(self, state) -> bool:
        """Complete, and nothing more may follow (a closed JSON value or tool call)."""
        return self.complete(state) and not isinstance(self.parts[-1], NoText) and \
            not (isinstance(self.parts[-1], Json) and state[1][1] == "num")

    def closure(self, state) -> str:
        i, st = state
        out = self.parts[i].closure(st)
        return out + "".join(p.closure(p.start()) for p in self.parts[i + 1:])


def tool_call_pattern(names: list[str]) -> Pattern:
    """`<tool_call>{"name": "<one of names>", "arguments": {...}}</tool_call>` (envs/json_tools.py's format)."""
    return Pattern((Lit(CALL_OPEN + '{"name": "'), OneOf(tuple(names)), Lit('", "arguments": '), Json(True),
                    Lit("}" + CALL_CLOSE)), name="tool_call")


def no_tool_call_pattern() -> Pattern:
    return Pattern((NoText(CALL_OPEN),), name="no_tool_call")


def json_object_pattern() -> Pattern:
    return Pattern((Json(True),), name="json_object")
