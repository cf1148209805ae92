"""The trainer state on disk as JSON plus safetensors: nothing in it can run code when it is read.

A checkpoint's trainer state (RL step, sampler and gate state, optimizer moments, RNG states, the async
buffer) used to be one `torch.save` pickle, and unpickling runs whatever the file asks for. Here the
structure goes to `trainer_state.json` and every tensor to `trainer_state.safetensors`; reading them
back parses JSON and raw tensor bytes, nothing else.

The JSON is the state itself, with a few tagged objects for what JSON lacks (each a one-key object
whose key starts with `__`):

- `{"__tensor__": "t3", "device": "cpu"}`: tensor `t3` of the safetensors file (restored to its device
  when that device exists here, else the CPU);
- `{"__tuple__": [...]}`: a tuple (Python's `random.getstate()` is nested tuples);
- `{"__items__": [[key, value], ...]}`: a dict whose keys are not all strings, or that has a key
  starting with `__` (optimizer `state` is keyed by parameter index);
- `{"__ndarray__": {"dtype": ..., "shape": [...], "data": [...]}}`: a NumPy array (NumPy's RNG state).

Anything else (a dataclass, an arbitrary object) is refused when the state is *written*, naming where
it sits: a type that belongs in the state gets an explicit `to_dict`/`from_dict` (e.g.
`rollout.async_source.AsyncState`), so the state never depends on importing a class named by the file.
Floats round-trip exactly (JSON keeps `repr`'s shortest form; NaN and ±inf as JSON's extensions).
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

JSON_FILE = "trainer_state.json"
TENSORS_FILE = "trainer_state.safetensors"
FORMAT = 2  # 1 was the pickle `trainer_state.pt`
_TAGS = ("__tensor__", "__tuple__", "__items__", "__ndarray__")


class StateFileError(ValueError):
    """The trainer state files are missing, malformed or do not fit together."""


def _encode(x: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if isinstance(x, enum.Enum):
        return _encode(x.value, tensors, where)
    if x is None or isinstance(x, (bool, str)):
        return x if type(x) in (bool, str) or x is None else (bool(x) if isinstance(x, bool) else str(x))
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x)
    if torch.is_tensor(x):
        key = f"t{len(tensors)}"
        tensors[key] = x.detach().to("cpu").contiguous().clone()
        return {"__tensor__": key, "device": str(x.device)}
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(x)]}
    if isinstance(x, list):
        return [_encode(v, tensors, f"{where}[{i}]") for i, v in enumerate(x)]
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in x):
            return {k: _encode(v, tensors, f"{where}.{k}") for k, v in x.items()}
        return {"__items__": [[_encode(k, tensors, f"{where} key"), _encode(v, tensors, f"{where}[{k!r}]")]
                              for k, v in x.items()]}
    np = _numpy()
    if np is not None and isinstance(x, np.ndarray):
        if x.dtype.kind not in "biuf":
            raise TypeError(f"the trainer state holds a NumPy array of dtype {x.dtype} at {where}; only numbers are stored")
        return {"__ndarray__": {"dtype": x.dtype.str, "shape": list(x.shape), "data": x.ravel().tolist()}}
    if np is not None and isinstance(x, np.generic):
        return _encode(x.item(), tensors, where)
    raise TypeError(f"the trainer state holds a {type(x).__module__}.{type(x).__qualname__} at {where}; "
                    "store plain data there (give the type to_dict/from_dict)")


def _numpy():
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy ships with torch's usual installs
        return None
    return numpy


def _decode(x: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(x, list):
        return [_decode(v, tensors) for v in x]
    if not isinstance(x, dict):
        return x
    tag = next(iter(x), None) if x else None
    if tag not in _TAGS or (len(x) != 1 and tag != "__tensor__"):
        return {k: _decode(v, tensors) for k, v in x.items()}
    body = x[tag]
    if tag == "__tensor__":
        if not isinstance(body, str) or body not in tensors:
            raise StateFileError(f"{JSON_FILE} names tensor {body!r}, which {TENSORS_FILE} does not hold")
        t = tensors[body]
        device = x.get("device", "cpu")
        if isinstance(device, str) and device.startswith("cuda") and torch.cuda.is_available():
            t = t.to(device)
        return t
    if tag == "__tuple__" and isinstance(body, list):
        return tuple(_decode(v, tensors) for v in body)
    if tag == "__items__" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
        out = {}
        for k, v in body:
            k = _decode(k, tensors)
            if isinstance(k, list):  # a key must be hashable: a list here was never a key
                raise StateFileError(f"{JSON_FILE} holds a list as a dict key")
            out[k] = _decode(v, tensors)
        return out
    if tag == "__ndarray__" and isinstance(body, dict):
        np = _numpy()
        dtype = np.dtype(str(body.get("dtype")))
        if dtype.kind not in "biuf":
            raise StateFileError(f"{JSON_FILE} holds an array of dtype {dtype}; only numbers are stored")
        return np.asarray(body.get("data"), dtype=dtype).reshape(body.get("shape"))
    raise StateFileError(f"{JSON_FILE} holds a malformed {tag} entry")


def save_state(folder: Path, state: dict[str, Any]) -> list[Path]:
    """Write `state` as `folder/trainer_state.json` and `folder/trainer_state.safetensors`; the two paths."""
    tensors: dict[str, torch.Tensor] = {}
    body = {"format": FORMAT, "state": _encode(state, tensors, "state")}
    folder = Path(folder)
    save_file(tensors, str(folder / TENSORS_FILE))
    (folder / JSON_FILE).write_text(json.dumps(body, allow_nan=True))
    return [folder / JSON_FILE, folder / TENSORS_FILE]


def load_state(folder: Path) -> dict[str, Any]:
    """The state `save_state` wrote in `folder`; StateFileError with the reason when the files are unusable."""
    folder = Path(folder)
    try:
        body = json.loads((folder / JSON_FILE).read_text())
    except FileNotFoundError:
        raise StateFileError(f"{JSON_FILE} is missing") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise StateFileError(f"{JSON_FILE} is not readable JSON ({type(exc).__name__})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT or not isinstance(body.get("state"), dict):
        raise StateFileError(f"{JSON_FILE} is not a format-{FORMAT} trainer state")
    try:
        tensors = load_file(str(folder / TENSORS_FILE))
    except FileNotFoundError:
        raise StateFileError(f"{TENSORS_FILE} is missing") from None
    except Exception as exc:  # safetensors' own errors (a bad header, a short file) have no common base
        raise StateFileError(f"{TENSORS_FILE} is not a safetensors file ({type(exc).__name__})") from None
    try:
        return _decode(body["state"], tensors)
    except (TypeError, ValueError, RecursionError) as exc:
        if isinstance(exc, StateFileError):
            raise
        raise StateFileError(f"{JSON_FILE} holds a malformed entry ({type(exc).__name__})") from None
