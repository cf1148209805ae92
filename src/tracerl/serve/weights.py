"""Checking pushed weights (`POST /v1/weights?version=N`) against the served model before any of them
is applied: a rejected push leaves the served weights and version exactly as they were.

A push must hold every tensor of the served model's `state_dict` and nothing else, each with the
served shape; a floating-point parameter may arrive in any floating dtype (it is cast to the served
one, as `load_state_dict` would) and must be finite *after* the cast (NaN, inf, or a value that
overflows the served dtype: 400); any other tensor (an integer buffer) must have the served dtype
exactly. Versions are strictly increasing: after a push tagged N only N + 1 or more is taken (409);
the first push may repeat the version the server started at (a trainer syncs its step-0 weights).
"""

from __future__ import annotations

import torch

from tracerl.serve.errors import APIError, bad_request

HEADER_MARGIN = 16 << 20  # bytes beside the tensors: the safetensors header (names, shapes, offsets)


def state_bytes(model) -> int:
    """What a safetensors body of this model's state_dict may weigh: its tensors plus the header margin."""
    return sum(t.numel() * t.element_size() for t in model.state_dict().values()) + HEADER_MARGIN


def check_version(version: int, current: int, pushed_before: bool) -> None:
    if version < current or (pushed_before and version == current):
        need = f"more than {current}" if pushed_before else f"{current} or more"
        raise APIError(409, f"weights version {version} is not newer than the served version {current}; push them "
                            f"tagged {need} (versions only increase)", param="version", code="stale_version")


def checked_state(own: dict[str, torch.Tensor], pushed: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The pushed tensors cast to the served dtypes, or a 400 naming the first tensor that does not fit."""
    unknown = sorted(set(pushed) - set(own))
    if unknown:
        raise bad_request(f"the pushed weights name a tensor the served model does not have ({unknown[0]!r}, "
                          f"{len(unknown)} in all); push the state_dict of the model this server serves",
                          param="weights", code="weights_mismatch")
    missing = sorted(set(own) - set(pushed))
    if missing:
        raise bad_request(f"the pushed weights lack {len(missing)} tensor(s) of the served model (first "
                          f"{missing[0]!r}); push the whole state_dict", param="weights", code="weights_mismatch")
    out = {}
    for name, served in own.items():
        t = pushed[name]
        if tuple(t.shape) != tuple(served.shape):
            raise bad_request(f"the pushed tensor {name!r} has shape {tuple(t.shape)}, the served model's "
                              f"{tuple(served.shape)}; push the state_dict of the model this server serves",
                              param="weights", code="weights_mismatch")
        if served.is_floating_point():
            if not t.is_floating_point():
                raise bad_request(f"the pushed tensor {name!r} is {t.dtype}, not floating point like the served "
                                  f"{served.dtype}; push the model's floating-point weights", param="weights",
                                  code="weights_mismatch")
            t = t.to(served.dtype)
            if not bool(torch.isfinite(t).all()):
                raise bad_request(f"the pushed tensor {name!r} holds NaN or infinite values (in {served.dtype}); "
                                  "push finite weights", param="weights", code="weights_not_finite")
        elif t.dtype != served.dtype:
            raise bad_request(f"the pushed tensor {name!r} is {t.dtype}, the served model's is {served.dtype}; "
                              "push tensors of the served dtypes", param="weights", code="weights_mismatch")
        out[name] = t
    return out


@torch.no_grad()
def apply_state(own: dict[str, torch.Tensor], checked: dict[str, torch.Tensor]) -> None:
    """Copy checked tensors into the served ones (in place; every check has already passed)."""
    for name, t in checked.items():
        own[name].copy_(t)
