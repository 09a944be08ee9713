"""Options dataclasses (defaults and help written once) and every front end built from them:
strings and nested mappings with type checks (config files, `--set method.field=value`,
Python), and the command line's parameters (`with_options`), so a default or help text changes
them all together.

On the command line, nested options become flat flags (`--exit-string`); two classes of one
command declaring the same flag share one parameter. Tuple fields take a comma-separated
string, or a repeated flag (`--vllm-arg`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import tomllib
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

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


# ---- the command line's parameters -----------------------------------------------------------
_REPEATED = ("--vllm-arg", "--set")  # tuple fields given as a repeated flag, not a comma list


@dataclasses.dataclass(frozen=True)
class Param:
    """One command-line parameter and the dataclass field(s) it sets."""

    name: str  # the Python keyword of the generated parameter
    flag: str  # "--min-tokens", or "--chat-template/--no-chat-template"
    short: str | None
    help: str
    default: Any  # the CLI default (None for tuple fields: keep the dataclass default)
    hint: Any  # the type Typer parses
    path: tuple[str, ...]  # the field's path inside its options class
    is_tuple: bool = False  # a tuple field: None on the command line keeps its default
    choices: tuple | None = None  # the allowed values, shown as the metavar (`pair|boundary`)

    @property
    def metavar(self) -> str | None:
        """What --help shows after the flag: the choices when the field declares them."""
        return "|".join(map(str, self.choices)) if self.choices else None


def _is_options(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _cli_type(hint: Any, flag: str) -> tuple[Any, bool]:
    """(type Typer parses, whether the field is a tuple) for a field's type hint."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) > 1 and str in inner:  # e.g. int | str: parsed as text, typed on build
            return (str | None if type(None) in args else str), False
        base, is_tuple = _cli_type(inner[0], flag)
        return (base | None if not is_tuple else base), is_tuple
    if origin is tuple:
        return (list[str] | None if flag in _REPEATED else str | None), True
    return hint, False


def _show_default(value: Any) -> bool | str:
    """What --help shows as a default: nothing for None, control characters escaped."""
    if value is None:
        return False
    if isinstance(value, str) and not value.isprintable():
        return repr(value)
    return True


def _default_text(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value)) if len(value) <= 4 else "built-in list"
    return str(value)


def params_of(cls: type, path: tuple[str, ...] = ()) -> list[Param]:
    """The parameters of an options class, nested options flattened."""
    hints = typing.get_type_hints(cls)
    out: list[Param] = []
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            continue  # not an option (e.g. InputOptions.fields: built from the *_field flags)
        hint = hints[f.name]
        if _is_options(hint):
            out += params_of(hint, (*path, f.name))
            continue
        flag = flag_name(f)
        name = flag.split("/")[0].lstrip("-").replace("-", "_")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        cli_hint, is_tuple = _cli_type(hint, flag)
        text = f.metadata["help"]
        if is_tuple:
            text += "" if "default:" in text else f" [default: {_default_text(default)}]"
            default = None
        out.append(Param(name, flag, f.metadata.get("short"), text, default, cli_hint,
                         (*path, f.name), is_tuple, f.metadata.get("choices")))
    return out


def _nest(path: tuple[str, ...], value: Any, into: dict) -> None:
    for part in path[:-1]:
        into = into.setdefault(part, {})
    into[path[-1]] = value


def build(cls: type, values: dict[str, Any], exclude: tuple[str, ...] = ()):
    """An instance of `cls` from command-line values (keyed by parameter name); tuple
    parameters left at None keep the dataclass default, and so do the fields in `exclude` (a
    parameter of the same name may belong to another class of the command)."""
    mapping: dict = {}
    for p in params_of(cls):
        if p.name not in values or p.path[-1] in exclude:  # not this command's: default stays
            continue
        value = values[p.name]
        if p.is_tuple:
            if value is None:
                continue
            value = tuple(value) if isinstance(value, list) else value
        _nest(p.path, value, mapping)
    return build_options(cls, mapping, cls.__name__)


def command_params(groups: dict[str, type], exclude: tuple[str, ...] = ()) -> list[Param]:
    """The distinct parameters of several options classes (a shared flag appears once), without
    the fields named in `exclude` (options that do not apply to a command keep their default)."""
    seen: dict[str, Param] = {}
    for cls in groups.values():
        for p in params_of(cls):
            if p.path[-1] in exclude:
                continue
            if p.name in seen:
                if seen[p.name].default != p.default:
                    raise TypeError(f"{p.flag}: two options classes declare other defaults")
                continue
            seen[p.name] = p
    return list(seen.values())


def with_options(*, exclude: tuple[str, ...] = (), **groups: type) -> Callable:
    """Decorator: add the parameters of the options classes in `groups` (keyword -> class) to a
    Typer command; the command receives each keyword as a built instance. Fields named in
    `exclude` get no parameter."""

    def decorate(fn: Callable) -> Callable:
        import typer  # (the command line's: the library loads no typer)

        own = list(inspect.signature(fn, eval_str=True).parameters.values())
        own = [p for p in own if p.name not in groups]
        extra = command_params(groups, exclude)
        clash = {p.name for p in own} & {p.name for p in extra}
        if clash:
            raise TypeError(f"{fn.__name__}: parameters declared twice: {sorted(clash)}")

        @functools.wraps(fn)
        def wrapper(**kwargs):
            built = {key: build(cls, kwargs, exclude) for key, cls in groups.items()}
            mine = {p.name: kwargs[p.name] for p in own if p.name in kwargs}
            return fn(**mine, **built)

        params = [
            *own,
            *(
                inspect.Parameter(
                    p.name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=p.default,
                    annotation=Annotated[
                        p.hint, typer.Option(*([p.flag] + ([p.short] if p.short else [])),
                                             help=p.help, metavar=p.metavar,
                                             show_default=_show_default(p.default))
                    ],
                )
                for p in extra
            ),
        ]
        # Keyword-only parameters may follow ones with defaults in any order for Typer.
        params = sorted(params, key=lambda p: p.kind)
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__  # Typer must see the generated signature, not fn's
        return wrapper

    return decorate
