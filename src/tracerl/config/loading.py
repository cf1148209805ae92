"""Loading a recipe: read the YAML (a shipped name or a path, refusing binary files and alias bombs),
apply `key.sub=value` overrides, validate into a `Recipe`, and explain the first error in one sentence
naming the bad key (or the override that set it) and the closest valid one."""

from __future__ import annotations

import difflib
import typing
from importlib import resources
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from tracerl.algorithms.spec import ALGORITHMS
from tracerl.config.recipe import Recipe
from tracerl.errors import UserError


def recipe_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("tracerl.recipes").iterdir() if p.name.endswith(".yaml"))


MAX_RECIPE_BYTES = 1 << 20
MAX_YAML_NODES = 100_000  # after aliases are expanded: a few lines of anchors can mean billions


def _decode(raw: bytes, what: str) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(raw) > 1 and raw.count(b"\x00") > len(raw) // 4):
        raise UserError(f"{what} is UTF-16 text, not UTF-8; save it as UTF-8 and run again")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserError(f"{what} is not UTF-8 text (a binary file?); give a YAML recipe saved as UTF-8") from None
    if "\x00" in text:
        raise UserError(f"{what} holds NUL bytes (a binary file?); give a YAML recipe saved as UTF-8")
    return text


def _expanded_size(node, sizes: dict[int, int], depth: int = 0) -> int:
    """Nodes in `node` once every alias is expanded (shared nodes counted once per use)."""
    if id(node) in sizes:
        return sizes[id(node)]
    if depth > 100:
        raise UserError("the YAML is nested more than 100 levels deep; flatten it")
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(n, sizes, depth + 1) for n in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, sizes, depth + 1) + _expanded_size(v, sizes, depth + 1) for k, v in node.value)
    sizes[id(node)] = size
    return size


def safe_yaml(text: str, what: str):
    """`yaml.safe_load`, refusing what would blow up later: invalid syntax, nesting deeper than
    100 levels, or aliases that expand past MAX_YAML_NODES nodes (an "alias bomb")."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_YAML_NODES:
            raise UserError(f"{what} expands to {size} YAML nodes through aliases (more than {MAX_YAML_NODES}); "
                            "write the values out instead of nesting anchors")
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise UserError(f"{what} is not valid YAML{where} ({problem}); fix the syntax and run again") from None
    except RecursionError:
        raise UserError(f"{what} is nested too deeply to read; flatten it") from None


def _read_yaml(name_or_path: str) -> tuple[dict[str, Any], str]:
    path = Path(name_or_path)
    if "\x00" in name_or_path:
        raise UserError("the recipe name holds a NUL character; give a shipped recipe name or a YAML path")
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        res = resources.files("tracerl.recipes") / f"{name_or_path}.yaml"
        if "/" in name_or_path or not res.is_file():
            close = difflib.get_close_matches(name_or_path, recipe_names(), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"shipped recipes: {', '.join(recipe_names())}"
            raise UserError(f"no recipe named {name_or_path[:200]!r}; {hint}")
        raw, source = res.read_bytes(), f"recipes/{name_or_path}.yaml"
    else:
        if not path.is_file():
            raise UserError(f"recipe file {path} does not exist; give a shipped recipe name or an existing YAML path")
        try:
            if path.stat().st_size > MAX_RECIPE_BYTES:
                raise UserError(f"recipe {path} is {path.stat().st_size} bytes, more than a recipe needs "
                                f"({MAX_RECIPE_BYTES}); give the YAML recipe, not a data file")
            raw = path.read_bytes()
        except OSError as err:
            raise UserError(f"recipe file {path} cannot be read ({err.strerror}); check its permissions") from None
        source = str(path)
    data = safe_yaml(_decode(raw, f"recipe {source}"), f"recipe {source}")
    if data is None:
        raise UserError(f"recipe {source} is empty; write at least one section (run:, model:, ...) "
                        "or run a shipped recipe by name")
    if not isinstance(data, dict):
        raise UserError(f"recipe {source} must be a YAML mapping of sections (run:, model:, ...), not a {type(data).__name__}")
    return data, source


def _models_in(ann: Any) -> list[type[BaseModel]]:
    """The pydantic models a field annotation can hold (a model, an optional one, a union of them)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    return [m for arg in typing.get_args(ann) for m in _models_in(arg)]


def _valid_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        full = f"{prefix}{name}"
        keys.append(full)
        for sub in _models_in(field.annotation):
            keys += [k for k in _valid_keys(sub, full + ".") if k not in keys]
    return keys


# keys of earlier releases, and where their setting lives now
_MOVED = {"rl.advantage": "rl.algorithm.name", "rl.advantage_scale": "rl.algorithm.scale",
          "rl.clip_low": "rl.algorithm.clip_low", "rl.clip_high": "rl.algorithm.clip_high",
          "rl.aggregation": "rl.algorithm.aggregation", "rl.kl_coef": "rl.algorithm.kl.coef"}
# union tags that pydantic puts into an error location (`rl.algorithm.dapo.clip_hgh`)
_TAGS = set(ALGORITHMS) | {"tis", "mis"}


def _unknown_key(key: str, where: str, algorithm: str | None = None) -> str:
    if key in _MOVED:
        return f"{key!r}{where} has moved: set {_MOVED[key]!r} instead"
    if algorithm is not None and key in _valid_keys(Recipe):  # a parameter of another algorithm
        return (f"{key!r}{where} is not a parameter of algorithm {algorithm!r}; "
                f"`tracerl algorithms` lists each algorithm's parameters")
    close = difflib.get_close_matches(key, _valid_keys(Recipe), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {key!r}{where}{hint}"


def field_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The pydantic model an annotation holds, and whether it is the item type of a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (list, tuple):
        inner = field_model(args[0])[0] if args else None
        return inner, True
    for a in args:  # Optional[...] / unions
        found = field_model(a)
        if found[0] is not None or found[1]:
            return found
    return None, False


def _check_key(key: str) -> None:
    """A dotted override key names a field; a number after a list field indexes it (`rl.stages.0.steps`)."""
    parts = key.split(".")
    plain = ".".join(p for p in parts if not p.isdigit())
    model: type[BaseModel] | None = Recipe
    in_list, done = False, []
    for part in parts:
        if in_list:
            if not part.isdigit():
                raise UserError(f"override key {key!r}: {'.'.join(done)!r} is a list; index it with a number, "
                                f"e.g. {'.'.join(done)}.0")
            in_list = False
        elif part.isdigit():
            raise UserError(f"override key {key!r}: {'.'.join(done)!r} is not a list, so {part} cannot index it")
        elif model is None:
            raise UserError(f"override key {key!r}: {'.'.join(done)!r} is a value, not a section")
        elif part not in model.model_fields:
            raise UserError(_unknown_key(plain[:200], "").replace("unknown key", "unknown override key"))
        else:
            annotation = model.model_fields[part].annotation
            if len(_models_in(annotation)) > 1:  # a union (rl.algorithm): the keys of all its members count
                if plain not in _valid_keys(Recipe):
                    raise UserError(_unknown_key(plain[:200], "").replace("unknown key", "unknown override key"))
                return
            model, in_list = field_model(annotation)
        done.append(part)


def _apply_override(data: dict[str, Any], item: str) -> str:
    """Apply `key.sub=value` (list items by index: `rl.stages.0.steps=3`) to the raw recipe.

    Returns the path the override answers for: its key, or the list item it created."""
    if "=" not in item:
        raise UserError(f"override {item[:200]!r} must look like key.sub=value")
    key, raw = item.split("=", 1)
    _check_key(key)
    if len(raw) > 10_000:
        raise UserError(f"override {key!r} has a value of {len(raw)} characters; put long values in a recipe file")
    value = safe_yaml(raw, f"the value of override {key!r}") if raw != "" else None
    node: Any = data
    parts, blame = key.split("."), key
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            idx = int(part)
            where = ".".join(parts[:i])
            if idx > len(node):
                raise UserError(f"override {item!r}: {where} has {len(node)} items, so index {idx} is out of range "
                                f"(use 0..{len(node)}; {len(node)} appends one)")
            if idx == len(node):
                node.append({} if not last else None)
                blame = ".".join(parts[:i + 1])  # the new item is the override's doing, all of its fields
            if last:
                node[idx] = value
            else:
                if node[idx] is None:
                    node[idx] = {}
                node = node[idx]
            continue
        if not isinstance(node, dict):
            raise UserError(f"override {item!r} goes inside {parts[i - 1]!r}, which is not a section in the recipe")
        if last:
            node[part] = value
        else:
            if node.get(part) is None:
                node[part] = [] if parts[i + 1].isdigit() else {}
            node = node[part]
    return blame


def _explain(err: ValidationError, source: str, overrides: dict[str, str] | None = None) -> str:
    """One sentence for the first validation error, blaming the override that set the value if one did."""
    e = err.errors()[0]
    loc = ".".join(str(x) for x in e["loc"] if x not in _TAGS)
    blamed = [k for k in (overrides or {}) if loc == k or loc.startswith(k + ".") or k.startswith(loc + ".")]
    if blamed:
        item = overrides[max(blamed, key=len)]
        source = f"override {item if len(item) <= 80 else item[:79] + '…'!r}"
    elif not loc and overrides:  # a check across fields: name the overrides that took part
        joined = " ".join(overrides.values())
        source = f"{source} with overrides {joined if len(joined) <= 120 else joined[:119] + '…'}"
    if e["type"] == "extra_forbidden":
        tags = [x for x in e["loc"] if x in ALGORITHMS]
        return _unknown_key(loc, f" in {source}", tags[0] if tags else None)
    if e["type"] == "union_tag_invalid":
        tag = e.get("ctx", {}).get("tag")
        known = [k.strip(" '") for k in str(e.get("ctx", {}).get("expected_tags", "")).split(",")]
        close = difflib.get_close_matches(str(tag), list(known), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
        return f"unknown {loc.rsplit('.', 1)[-1]} {tag!r} for {loc!r} in {source}; {hint}"
    if not loc or (e["type"] == "value_error" and isinstance(e.get("input"), dict)):  # a check across fields
        return f"{source}: {e['msg'].removeprefix('Value error, ')}"
    got = repr(e.get("input"))
    got = got if len(got) <= 200 else got[:200] + f"... ({len(got)} characters)"
    return f"bad value for {loc!r} in {source}: {e['msg']} (got {got})"


def load_recipe(name_or_path: str = "default", overrides: list[str] | None = None) -> Recipe:
    data, source = _read_yaml(name_or_path)
    applied = {}
    for item in overrides or []:
        applied[_apply_override(data, item)] = item
    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        raise UserError(_explain(err, source, applied)) from None
