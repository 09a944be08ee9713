"""Command-line parameters generated from the options dataclasses (`options.option`), so a
default or help text changes the CLI, config files, `--set` and Python together.

Nested options become flat flags (`--exit-string`); two classes of one command declaring the
same flag share one parameter. Tuple fields take a comma-separated string, or a repeated flag
(`--vllm-arg`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from cotcredit.options import build_options, flag_name

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
