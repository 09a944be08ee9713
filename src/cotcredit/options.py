"""Method options from plain mappings (YAML/TOML config files, `--set method.field=value`).

Every method's options are a dataclass with its defaults written once; this module builds them
from strings and nested dicts with type checks, so the CLI, config files and Python agree.
A key may name a field of a nested options dataclass directly (`exit_string` for
`forcing.exit_string`) when that is unambiguous.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

import tomllib
import yaml

from cotcredit.errors import UserError


def _convert(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(value, a, where)
            except UserError as e:
                errors.append(str(e))
        raise UserError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else list(value)
        return tuple(_convert(v.strip() if isinstance(v, str) else v, args[0] if args else str, where)
                     for v in items if not (isinstance(v, str) and not v.strip()))
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, dict):
            raise UserError(f"{where}: expected a mapping of {hint.__name__} fields")
        return build_options(hint, value, where)
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1", "yes", "on"):
                return True
            if str(value).lower() in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if hint is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if hint is float:
            return float(value)
        if hint is str:
            if not isinstance(value, (str, int, float)):
                raise ValueError
            return str(value)
    except (TypeError, ValueError):
        name = getattr(hint, "__name__", str(hint))
        raise UserError(f"{where}: expected {name}, got {value!r}") from None
    return value


def _fields(cls) -> dict[str, tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}


def build_options(cls, mapping: dict[str, Any] | None, where: str = "options", base=None):
    """An instance of options dataclass `cls` from `mapping`, starting from `base` or defaults."""
    obj = base if base is not None else cls()
    if not mapping:
        return obj
    fields = _fields(cls)
    updates: dict[str, Any] = {}
    nested_updates: dict[str, dict[str, Any]] = {}
    for key, value in mapping.items():
        key = key.replace("-", "_")
        if key in fields:
            _, hint = fields[key]
            if dataclasses.is_dataclass(hint) and isinstance(value, dict):
                nested_updates.setdefault(key, {}).update(value)
            else:
                updates[key] = _convert(value, hint, f"{where}.{key}")
            continue
        owners = [n for n, (_, h) in fields.items() if dataclasses.is_dataclass(h)
                  and _find_owner(h, key) is not None]
        if len(owners) == 1:
            nested_updates.setdefault(owners[0], {})[key] = value
            continue
        known = ", ".join(sorted(fields))
        raise UserError(f"{where}: unknown option '{key}' (known: {known})")
    for name, sub in nested_updates.items():
        _, hint = fields[name]
        current = getattr(obj, name)
        inner = {}
        for k, v in sub.items():
            if k in _fields(hint):
                inner[k] = v
            else:
                owner = _find_owner(hint, k)
                inner.setdefault(owner, {})[k] = v
        updates[name] = build_options(hint, inner, f"{where}.{name}", base=current)
    return dataclasses.replace(obj, **updates)


def _find_owner(cls, key: str) -> str | None:
    """Name of the field of `cls` whose (nested) options hold `key`."""
    for name, (_, hint) in _fields(cls).items():
        if name == key:
            return name
        if dataclasses.is_dataclass(hint) and _find_owner(hint, key) is not None:
            return name
    return None


def read_config(path: Path) -> dict[str, Any]:
    """A YAML, TOML or JSON file holding {method: {option: value}}."""
    if not path.exists():
        raise UserError(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"{path}: cannot parse ({first})") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError(f"{path}: expected a mapping of method name -> options")
    return data


def parse_sets(items: list[str] | None) -> dict[str, dict[str, str]]:
    """`["mc.rollouts=4", ...]` -> {"mc": {"rollouts": "4"}}."""
    out: dict[str, dict[str, str]] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        method, dot, name = key.partition(".")
        if not sep or not dot or not method or not name:
            raise UserError(f"--set {item}: expected METHOD.OPTION=VALUE (e.g. mc.rollouts=4)")
        out.setdefault(method.strip(), {})[name.strip()] = value
    return out
