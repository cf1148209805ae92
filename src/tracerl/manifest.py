"""The run manifest: which code, configuration, data, tokenizer and environment produced a run."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

PACKAGES = ("tracerl", "torch", "transformers", "tokenizers", "safetensors", "pydantic", "numpy", "PyYAML")


def git_state(path: Path | None = None) -> dict[str, Any]:
    """Commit and dirty flag of the checkout holding tracerl's code (null when not a checkout)."""
    where = path or Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                                    capture_output=True, text=True, timeout=10).stdout.strip())
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def package_versions() -> dict[str, str | None]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def hardware() -> dict[str, Any]:
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "memory_bytes": mem,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def build_manifest(*, config_yaml: str, seeds: dict[str, int], tokenizer: dict[str, str],
                   tasks: dict[str, Any], env: dict[str, str], verifier: dict[str, str],
                   sandbox: dict[str, Any], truncation_policy: str, model: dict[str, Any],
                   backend: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "code": git_state(), "config_sha256": sha256_text(config_yaml), "packages": package_versions(),
        "tokenizer": tokenizer, "tasks": tasks, "env": env, "verifier": verifier, "sandbox": sandbox,
        "seeds": seeds, "hardware": hardware(), "truncation_policy": truncation_policy, "model": model,
        "backend": backend or {"name": "local"},  # run.backend (rollout/ray_backend.py)
    }
