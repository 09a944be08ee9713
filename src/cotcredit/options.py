"""Options dataclasses (defaults written once) built from strings and nested mappings with type
checks, so the CLI, config files, `--set method.field=value` and Python agree.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from cotcredit.errors import UserError, first_line


def option(default: Any = dataclasses.MISSING, *, help: str, choices: tuple | None = None,
           default_factory: Any = dataclasses.MISSING, flag: str | None = None,
           short: str | None = None) -> Any:
    """A field of an options dataclass with its one-line help. `choices`: the allowed values
    (`check_choices`); `flag`: the command-line name when not `--<field-name>`; `short`: a
    one-letter alias such as "-k"."""
    meta = {"help": help, "choices": choices, "flag": flag, "short": short}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def flag_name(f: dataclasses.Field) -> str:
    """The command-line flag of an options field (`--min-tokens` for `min_tokens`)."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def comma_list(value: str | Iterable[str]) -> list[str]:
    """Names from ``"a,b"`` or a list: stripped, blanks and repeats dropped, in order."""
    names = value.split(",") if isinstance(value, str) else value
    return list(dict.fromkeys(n.strip() for n in names if n.strip()))


def check_choices(obj: Any) -> None:
    """Raise a one-line UserError for a field whose value is not among its declared choices
    (an optional field left at None is fine)."""
    for f in dataclasses.fields(obj):
        choices = f.metadata.get("choices")
        value = getattr(obj, f.name)
        if choices and value not in choices and not (value is None and f.default is None):
            raise UserError(
                f"{flag_name(f)} must be one of {', '.join(map(str, choices))}, got '{value}'"
            )


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
        if not isinstance(value, (str, list, tuple)):
            raise UserError(f"{where}: expected a list or comma-separated string, got {value!r}")
        items = value.split(",") if isinstance(value, str) else list(value)
        item_type = args[0] if args else str
        return tuple(_convert(v.strip() if isinstance(v, str) else v, item_type, where)
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
            if isinstance(value, bool):  # float(True) would be 1.0
                raise ValueError
            return float(value)
        if hint is str:
            # Not bool: YAML reads an unquoted yes/on/true as True, which would become "True".
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
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
    """Options `cls` from `mapping`, starting from `base` or the defaults. Keys name fields
    (``-`` and ``_`` alike); a nested field takes a mapping, a dotted key
    (``target.forcing.exit_string``) or, when unambiguous, the bare name (``exit_string``)."""
    obj = base if base is not None else cls()
    if not mapping:
        return obj
    fields = _fields(cls)
    updates: dict[str, Any] = {}
    nested_updates: dict[str, dict[str, Any]] = {}
    for key, value in mapping.items():
        key = str(key).replace("-", "_")
        head, dot, rest = key.partition(".")
        if dot and head in fields and dataclasses.is_dataclass(fields[head][1]):
            nested_updates.setdefault(head, {})[rest] = value
            continue
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
        if owners:
            choices = ", ".join(sorted(_paths(cls, key)))
            raise UserError(f"{where}: option '{key}' is ambiguous; name it as one of {choices}")
        known = ", ".join(sorted(fields))
        raise UserError(f"{where}: unknown option '{key}' (known: {known})")
    for name, sub in nested_updates.items():
        _, hint = fields[name]
        # The nested level resolves its own keys (dotted, bare or ambiguous) the same way.
        current = updates.get(name, getattr(obj, name))
        updates[name] = build_options(hint, sub, f"{where}.{name}", base=current)
    return dataclasses.replace(obj, **updates)


def _find_owner(cls, key: str) -> str | None:
    """Name of the field of `cls` whose (nested) options hold `key`."""
    for name, (_, hint) in _fields(cls).items():
        if name == key:
            return name
        if dataclasses.is_dataclass(hint) and _find_owner(hint, key) is not None:
            return name
    return None


def _paths(cls, key: str, prefix: str = "") -> list[str]:
    """Dotted paths of every nested field named `key` below `cls` (``target.forcing.seed``)."""
    out = []
    for name, (_, hint) in _fields(cls).items():
        if name == key and prefix:
            out.append(prefix + name)
        if dataclasses.is_dataclass(hint):
            out += _paths(hint, key, f"{prefix}{name}.")
    return out


def read_config(path: Path) -> dict[str, Any]:
    """A YAML, TOML or JSON file holding {method: {option: value}}."""
    if not path.exists():
        raise UserError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:  # a folder, no permission, not UTF-8
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UserError(f"{path}: cannot read ({' '.join(reason.split())})") from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: cannot parse ({first_line(e)})") from None
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
