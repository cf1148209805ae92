"""Helpers the environment adapters share: the optional `verifiers` import, loading a user's module by
name or .py path, and a verifiers task's prompt as chat messages."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path

from tracerl.envs.base import Message
from tracerl.errors import UserError


def import_verifiers():
    try:
        import verifiers.v1 as vf
    except ImportError:
        raise UserError("env.name verifiers:... needs the verifiers package; pip install 'tracerl[verifiers]'") from None
    return vf


def load_user_module(target: str, scheme: str = "verifiers"):
    if target.endswith(".py"):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise UserError(f"env.name {scheme}:{target}: no such file; give an existing .py path or a module name")
        name = f"tracerl_vf_{hashlib.sha256(str(path).encode()).hexdigest()[:10]}_{path.stem}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
        return sys.modules[name], str(path)
    try:
        return importlib.import_module(target), target
    except ModuleNotFoundError as err:
        raise UserError(f"env.name {scheme}:{target}: module {err.name!r} is not installed or not on the Python path; "
                        "install the environment or give its .py file") from None


def task_messages(data) -> list[Message]:
    msgs: list[Message] = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    p = data.prompt
    if isinstance(p, str):
        return [*msgs, {"role": "user", "content": p}]
    for m in p or []:
        m = m.model_dump() if hasattr(m, "model_dump") else dict(m)
        if not isinstance(m.get("content"), str):
            raise UserError("a verifiers task prompt with non-text content cannot be rendered by tracerl yet")
        msgs.append({"role": m["role"], "content": m["content"]})
    return msgs
