"""Option builders: dataclasses from config mappings and `--set` strings (cotcredit.options)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cotcredit.errors import UserError
from cotcredit.options import build_options, parse_sets, read_config


# Options shaped like the methods' own: a nested dataclass two levels deep, unions with None,
# tuples, and a key (`seed`) that two nested dataclasses share.
@dataclasses.dataclass(frozen=True)
class Forcing:
    exit_string: str | None = None
    terminator: str = "}"


@dataclasses.dataclass(frozen=True)
class Target:
    forcing: Forcing = dataclasses.field(default_factory=Forcing)
    baseline_text: str | None = None
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Sampler:
    seed: int = 1
    temperature: float = 1.0


@dataclasses.dataclass(frozen=True)
class Opts:
    target: Target = dataclasses.field(default_factory=Target)
    sampler: Sampler = dataclasses.field(default_factory=Sampler)
    rollouts: int = 8
    top_p: float = 1.0
    length_norm: bool = False
    kinds: tuple[str, ...] = ("ig",)
    sizes: tuple[int, ...] = (1, 2)
    batch_size: int | None = None
    name: str = "x"


# ---- build_options ---------------------------------------------------------------------------
def test_no_mapping_gives_defaults_or_the_base():
    assert build_options(Opts, None) == Opts()
    assert build_options(Opts, {}) == Opts()
    base = Opts(rollouts=3)
    assert build_options(Opts, {}, base=base) is base
    assert build_options(Opts, {"top_p": "0.5"}, base=base) == Opts(rollouts=3, top_p=0.5)


def test_strings_are_converted_to_the_field_types():
    got = build_options(Opts, {"rollouts": "16", "top_p": "0.9", "length_norm": "yes",
                               "kinds": "ig, saliency,", "sizes": "3,4", "batch_size": "none",
                               "name": 7})
    assert got == Opts(rollouts=16, top_p=0.9, length_norm=True, kinds=("ig", "saliency"),
                       sizes=(3, 4), batch_size=None, name="7")
    assert isinstance(got.rollouts, int) and isinstance(got.top_p, float)


@pytest.mark.parametrize(("text", "value"), [
    ("true", True), ("True", True), ("1", True), ("on", True), ("yes", True),
    ("false", False), ("0", False), ("OFF", False), ("no", False), (True, True), (False, False),
])
def test_bool_spellings(text, value):
    assert build_options(Opts, {"length_norm": text}).length_norm is value


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("rollouts", 4, 4), ("rollouts", 4.0, 4), ("rollouts", " 12 ", 12),
    ("top_p", 1, 1.0), ("top_p", "1e-1", 0.1),
    ("batch_size", None, None), ("batch_size", "null", None), ("batch_size", "32", 32),
    ("kinds", ["a", "b"], ("a", "b")), ("kinds", "", ()), ("sizes", [5, "6"], (5, 6)),
])
def test_native_and_string_values(key, value, expected):
    got = getattr(build_options(Opts, {key: value}), key)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("rollouts", "many", "opts.rollouts: expected int, got 'many'"),
    ("rollouts", 2.5, "opts.rollouts: expected int, got 2.5"),
    ("rollouts", "2.0", "opts.rollouts: expected int, got '2.0'"),
    ("rollouts", True, "opts.rollouts: expected int, got True"),
    ("rollouts", None, "opts.rollouts: expected int, got None"),
    ("top_p", "high", "opts.top_p: expected float, got 'high'"),
    ("top_p", True, "opts.top_p: expected float, got True"),
    ("length_norm", "maybe", "opts.length_norm: expected bool, got 'maybe'"),
    ("length_norm", 2, "opts.length_norm: expected bool, got 2"),
    ("batch_size", "lots", "opts.batch_size: expected int, got 'lots'"),
    ("sizes", "1,x", "opts.sizes: expected int, got 'x'"),
    ("sizes", 5, "opts.sizes: expected a list or comma-separated string, got 5"),
    ("name", ["a"], "opts.name: expected str, got ['a']"),
    ("name", True, "opts.name: expected str, got True"),  # YAML's `yes`: quote it
    ("target", "x", "opts.target: expected a mapping of Target fields"),
])
def test_bad_values_are_one_line_user_errors(key, value, message):
    with pytest.raises(UserError) as e:
        build_options(Opts, {key: value}, "opts")
    assert str(e.value) == message


def test_nested_mappings_and_dashes():
    got = build_options(Opts, {"target": {"forcing": {"exit-string": "E"}, "seed": "4"}})
    assert got.target == Target(forcing=Forcing(exit_string="E"), seed=4)
    assert got.sampler == Sampler()
    # A nested mapping updates the current value, it does not reset its other fields.
    base = Opts(target=Target(baseline_text="B", seed=9))
    got = build_options(Opts, {"target": {"forcing": {"terminator": ")"}}}, base=base)
    assert got.target == Target(forcing=Forcing(terminator=")"), baseline_text="B", seed=9)


def test_unambiguous_nested_keys_reach_their_field():
    got = build_options(Opts, {"exit_string": "E", "baseline_text": "B", "temperature": "0.5"})
    assert got.target.forcing.exit_string == "E" and got.target.baseline_text == "B"
    assert got.sampler.temperature == 0.5
    assert dataclasses.replace(got, target=Target(), sampler=Sampler()) == Opts()
    # With a nested mapping for the same field, both apply.
    got = build_options(Opts, {"target": {"seed": 3}, "exit_string": "E"})
    assert got.target == Target(forcing=Forcing(exit_string="E"), seed=3)
    # A dataclass instance is taken as it is, and a nested key then updates it.
    got = build_options(Opts, {"target": Target(seed=5), "terminator": ")"})
    assert got.target == Target(forcing=Forcing(terminator=")"), seed=5)


def test_dotted_keys_name_nested_fields():
    got = build_options(Opts, {"target.seed": "2", "sampler.seed": "3",
                               "target.forcing.exit_string": "E"})
    assert (got.target.seed, got.sampler.seed, got.target.forcing.exit_string) == (2, 3, "E")
    with pytest.raises(UserError, match=r"opts.target: unknown option 'nope'"):
        build_options(Opts, {"target.nope": 1}, "opts")
    with pytest.raises(UserError, match=r"opts: unknown option 'rollouts.x'"):
        build_options(Opts, {"rollouts.x": 1}, "opts")


def test_an_ambiguous_nested_key_is_an_error_naming_the_choices():
    with pytest.raises(UserError) as e:
        build_options(Opts, {"seed": 1}, "opts")
    assert str(e.value) == ("opts: option 'seed' is ambiguous; name it as one of "
                            "sampler.seed, target.seed")


def test_unknown_keys():
    with pytest.raises(UserError) as e:
        build_options(Opts, {"rolouts": 3}, "mc")
    msg = str(e.value)
    assert msg.startswith("mc: unknown option 'rolouts' (known: ") and "rollouts" in msg
    assert "\n" not in msg
    with pytest.raises(UserError, match=r"mc.target.forcing: unknown option 'colour'"):
        build_options(Opts, {"target": {"forcing": {"colour": 1}}}, "mc")


def test_mappings_are_not_modified():
    mapping = {"target": {"forcing": {"exit_string": "E"}}, "terminator": ")"}
    snapshot = json.loads(json.dumps(mapping))
    build_options(Opts, mapping)
    assert mapping == snapshot


def test_real_method_options_build():
    from cotcredit.methods.mc import McOptions

    got = build_options(McOptions, {"rollouts": "4", "max_boundaries": "none",
                                    "save-rollouts": "ro.parquet"}, "mc")
    assert got == McOptions(rollouts=4, max_boundaries=None, save_rollouts="ro.parquet")


# ---- read_config -----------------------------------------------------------------------------
CONFIG = {"mc": {"rollouts": 16, "temperature": 0.7}, "rredcot": {"value": "rhat"}}


@pytest.mark.parametrize("name, text", [
    ("o.yaml", "mc:\n  rollouts: 16\n  temperature: 0.7\nrredcot:\n  value: rhat\n"),
    ("o.yml", "mc: {rollouts: 16, temperature: 0.7}\nrredcot: {value: rhat}\n"),
    ("o.toml", "[mc]\nrollouts = 16\ntemperature = 0.7\n[rredcot]\nvalue = \"rhat\"\n"),
    ("o.TOML", "[mc]\nrollouts = 16\ntemperature = 0.7\n[rredcot]\nvalue = \"rhat\"\n"),
    ("o.json", json.dumps(CONFIG)),
    ("options", "mc: {rollouts: 16, temperature: 0.7}\nrredcot: {value: rhat}\n"),  # YAML
])
def test_read_config_formats(tmp_path: Path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert read_config(path) == CONFIG


def test_read_config_empty_file(tmp_path: Path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing yet\n")
    assert read_config(path) == {}


@pytest.mark.parametrize("name, content, message", [
    ("bad.yaml", "mc: [1, 2\n", "cannot parse"),
    ("bad.toml", "[mc\n", "cannot parse"),
    ("bad.json", "{\"mc\": }", "cannot parse"),
    ("list.yaml", "- mc\n- rredcot\n", "expected a mapping of method name -> options"),
    ("flat.json", "{\"rollouts\": 4}", "expected a mapping of method name -> options"),
    ("latin1.yaml", b"mc: {name: caf\xe9}\n", "cannot read"),
])
def test_read_config_bad_files(tmp_path: Path, name, content, message):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(UserError) as e:
        read_config(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_read_config_missing_file_or_folder(tmp_path: Path):
    with pytest.raises(UserError, match="no such file"):
        read_config(tmp_path / "nope.yaml")
    with pytest.raises(UserError) as e:
        read_config(tmp_path)
    assert str(e.value).startswith(f"{tmp_path}: ") and "\n" not in str(e.value)


# ---- parse_sets ------------------------------------------------------------------------------
def test_parse_sets():
    assert parse_sets(None) == {} and parse_sets([]) == {}
    got = parse_sets(["mc.rollouts=4", "mc.temperature=0.5", "rredcot.value=rhat",
                      " loo . exit_string =a=b", "mc.rollouts=6", "loo.target.seed=1",
                      "mc.save_rollouts="])
    assert got == {"mc": {"rollouts": "6", "temperature": "0.5", "save_rollouts": ""},
                   "rredcot": {"value": "rhat"},
                   "loo": {"exit_string": "a=b", "target.seed": "1"}}


@pytest.mark.parametrize("item", ["mc.rollouts", "rollouts=4", "=4", ".rollouts=4", "mc.=4", ""])
def test_parse_sets_bad_items(item):
    with pytest.raises(UserError) as e:
        parse_sets([item])
    assert str(e.value) == f"--set {item}: expected METHOD.OPTION=VALUE (e.g. mc.rollouts=4)"


def test_sets_build_nested_options_end_to_end():
    sets = parse_sets(["opts.target.forcing.exit_string=</think>", "opts.rollouts=2",
                       "opts.terminator=)"])
    got = build_options(Opts, sets["opts"], "opts")
    assert got.target.forcing == Forcing(exit_string="</think>", terminator=")")
    assert got.rollouts == 2
