"""The YAML config of ``cotcredit train``: one validated ``TrainConfig``, errors as one line.

A minimal config::

    train_file: data/train.jsonl     # prompt, answer, optional solution per record
    output_dir: runs/rredcot
    advantage: rredcot   # grpo (default) | rredcot | mc | oracle | shuffled | method
    grpo:
      num_generations: 8
      max_completion_length: 1024
      learning_rate: 1.0e-6
      max_steps: 500

Paths (``model`` when a folder or .gguf file, ``train_file``, ``eval_file``, ``output_dir``) are
relative to the config's folder; a hub id that names no path there stays an id
(``resolve_path``). Data files are read like the analysis commands' inputs, with
``data_format`` (a ``--format`` preset) and ``train_split`` / ``eval_split``. ``model``
omitted: the embedded default model.

``grpo`` holds options of TRL's ``GRPOConfig`` under TRL's names; one left out keeps TRL's
default, except ``bf16`` (default: on when the GPU supports it) and ``logging_steps`` (1).
Other GRPOConfig options go under ``grpo.extra`` (checked against its field names). TRL 1.16
has no ``max_prompt_length``: prompts are not truncated.

Prompts are rendered as the analysis commands render them (chat template and
``system_prompt``; ``chat_template: false``: raw text). ``dtype: auto`` keeps float32 weights
(TRL's ``bf16`` trains in autocast). ``eval``: how ``eval_file`` is answered (greedy by
default). ``lora`` trains LoRA adapters (``peft``, extra ``cotcredit[train]``)::

    lora: {rank: 16, alpha: 32, target_modules: [q_proj, v_proj]}   # default: all-linear

Credit that reads the policy reads the adapted one; checkpoints hold the adapters.

``advantage`` names the credit source (``training.credit``: grpo, rredcot, mc, oracle,
shuffled, method); ``credit`` says how its segment rewards become token advantages::

    advantage: oracle
    credit: {form: segment-rewards, segments: lines}   # form default: reweight (strength, floor)
    oracle: {regime: unique}    # the training problems carry the regime's meta field;
                                # span: rest (default) | first, the lines a wrong one's −1 covers
    mc: {rollouts: 4}           # samples per segment boundary
    method: {name: value-head, options: {head: head.pt}}   # any registered method's credit

``rredcot`` takes any option of ``methods.rredcot.RredcotOptions`` and ``terminal_in_weights``.
Older configs' ``rredcot.segments``/``strength``/``floor``/``shuffle`` still load (with a
DeprecationWarning) as ``credit.segments``/``strength``/``floor`` and ``advantage: shuffled``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import warnings
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from cotcredit.errors import UserError
from cotcredit.extras import require
from cotcredit.lm.loading import looks_like_path
from cotcredit.training.advantages import DEFAULT_FLOOR, DEFAULT_FORM, DEFAULT_STRENGTH

# grpo_kwargs, lora_config, to_grpo_config: the TRL and peft builders, here too under their
# names of 0.2 (defined in trl_config).
from cotcredit.training.trl_config import (  # noqa: F401
    grpo_config_fields,
    grpo_kwargs,
    lora_config,
    to_grpo_config,
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _empty_section_is_default(cls, value, info):
        # `rredcot:` with everything commented out is YAML null: treat it as "all defaults".
        field = cls.model_fields[info.field_name]
        if value is None and isinstance(field.default, BaseModel):
            return {}
        return value


def _check_segments(value):
    if value == "lines" or (type(value) is int and value >= 1):
        return value
    raise ValueError("must be a positive integer or 'lines'")


class CreditOptions(_Section):
    """How a credit source's segment rewards become per-token advantages (every source)."""

    form: Literal["reweight", "segment-rewards"] = DEFAULT_FORM  # advantages.py
    # target number of reasoning segments per completion (rredcot, mc), or "lines": one per
    # reasoning line (the step segmentation v̂ needs on reasoning written a step per line)
    segments: int | Literal["lines"] = 8
    strength: float = Field(DEFAULT_STRENGTH, ge=0)  # β of reweight
    floor: float = Field(DEFAULT_FLOOR, ge=0, le=1)  # share of the plain advantage reweight keeps
    shuffled: Literal["rredcot", "mc", "oracle", "method"] = "rredcot"  # what `shuffled` permutes

    @field_validator("segments", mode="before")
    @classmethod
    def _segments(cls, value):
        return _check_segments(value)


_MOVED = ("segments", "strength", "floor")  # rredcot.<key> before credit.<key> existed
# Options of RredcotOptions that the rredcot section may not set: training fixes them.
_FIXED_RREDCOT = {"sum_to": "training redistributes ζ − g_0 (sum_to: advantage)",
                  "forcing": "set rredcot.exit_string"}


class RredcotTrainingOptions(_Section):
    """The ``rredcot`` credit source: RREDCoT's options as ``methods.rredcot.RredcotOptions``
    names them (any of them; the few common ones are listed), plus ``terminal_in_weights``."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    value: Literal["rhat", "vhat", "both"] = "rhat"  # which estimate g_k is built from
    exit_string: str | None = None  # answer-forcing string E; None: chosen per template
    length_norm: bool = False  # per-token (geometric-mean) normalisation of v-hat
    # false: rewards g_k - g_{k-1} alone, the terminal correction zeta - g_K kept out
    terminal_in_weights: bool = True

    @model_validator(mode="after")
    def _rredcot_options(self):
        """Other keys must be RredcotOptions fields (checked by building the options)."""
        from cotcredit.methods.rredcot import RredcotOptions

        names = {f.name for f in dataclasses.fields(RredcotOptions)}
        for key in self.model_extra or {}:
            if key in _FIXED_RREDCOT:
                raise ValueError(f"'{key}' cannot be set here: {_FIXED_RREDCOT[key]}")
            if key.replace("-", "_") not in names:
                known = sorted({*names, *type(self).model_fields} - set(_FIXED_RREDCOT))
                close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                hint = f" (did you mean 'rredcot.{close[0]}'?)" if close else ""
                raise ValueError(f"unknown key 'rredcot.{key}'{hint}")
        self.options()  # every value checked now, not at the first scoring
        return self

    def options(self):
        """The ``RredcotOptions`` the scorer runs with (``sum_to="advantage"``)."""
        from cotcredit.lm.encoding import ForcingOptions
        from cotcredit.methods.rredcot import RredcotOptions
        from cotcredit.options import build_options

        base = RredcotOptions(value=self.value, sum_to="advantage", length_norm=self.length_norm,
                              forcing=ForcingOptions(exit_string=self.exit_string))
        try:
            return build_options(RredcotOptions, dict(self.model_extra or {}), "rredcot",
                                 base=base).validate()
        except UserError as exc:
            raise ValueError(str(exc).removeprefix("rredcot: ")) from None


class McTrainingOptions(_Section):
    """The ``mc`` credit source: Monte Carlo rollouts from the current policy."""

    rollouts: int = Field(4, ge=1)  # samples per segment boundary
    temperature: float | None = Field(None, gt=0)  # None: grpo.temperature (TRL's 1.0 if unset)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int | None = Field(None, ge=1)  # None: grpo.max_completion_length
    max_boundaries: int | None = Field(None, ge=2)  # roll out at most this many; interpolate


class MethodSourceOptions(_Section):
    """The ``method`` credit source: a registered method and its options (as ``--set``)."""

    name: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class OracleOptions(_Section):
    """The ``oracle`` credit source: a bench regime's checker judges each completion's steps."""

    regime: str | None = None  # cotcredit.bench regime (unique, multipath, forecast, long)
    # which lines of a wrong completion get −1: every line from the first wrong step on
    # (rest), or that step's line alone (first: a value difference; training.credit)
    span: Literal["rest", "first"] = "rest"


class LoraOptions(_Section):
    """LoRA adapters (peft) trained instead of the full weights; ``rank: 0`` (default) is off."""

    rank: int = Field(0, ge=0)  # r of LoraConfig; 0: train every weight (no LoRA)
    alpha: float = Field(16.0, gt=0)  # lora_alpha (the update is scaled by alpha / rank)
    target_modules: str | list[str] = "all-linear"  # module names, or peft's "all-linear"
    dropout: float = Field(0.0, ge=0, lt=1)  # lora_dropout


class GrpoOptions(_Section):
    """Options of TRL's GRPOConfig, under TRL's names; None (omitted) keeps TRL's default."""

    num_generations: int | None = Field(None, ge=2)
    max_completion_length: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, gt=0)
    beta: float | None = Field(None, ge=0)
    epsilon: float | None = Field(None, gt=0)
    learning_rate: float | None = Field(None, gt=0)
    per_device_train_batch_size: int | None = Field(None, ge=1)
    gradient_accumulation_steps: int | None = Field(None, ge=1)
    max_steps: int | None = Field(None, ge=1)  # None: train for num_train_epochs
    num_train_epochs: float | None = Field(None, gt=0)
    logging_steps: int | None = Field(None, ge=1)
    save_steps: int | None = Field(None, ge=1)
    save_total_limit: int | None = Field(None, ge=1)
    loss_type: (
        Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"] | None
    ) = None
    scale_rewards: Literal["group", "batch", "none"] | None = None
    mask_truncated_completions: bool | None = None
    gradient_checkpointing: bool | None = None
    use_vllm: bool | None = None
    report_to: str | list[str] | None = None
    bf16: bool | None = None  # None: on when a bf16-capable GPU is present
    extra: dict[str, Any] = Field(default_factory=dict)  # any other GRPOConfig option


class EvalOptions(_Section):
    """How eval_file is answered before and after training (accuracy graded with math-verify)."""

    temperature: float = Field(0.0, ge=0)  # 0: greedy decoding
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int | None = Field(None, ge=1)  # None: grpo.max_completion_length
    samples: int = Field(1, ge=1)  # completions per problem (accuracy averages over them)
    batch_size: int | None = Field(None, ge=1)  # rows per generate call; None: automatic
    every: int | None = Field(None, ge=1)  # also evaluate every N steps (eval_curve.jsonl)


class TrainConfig(_Section):
    """Everything ``cotcredit train`` needs; built by ``load_config`` from a YAML file."""

    model: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: float32 weights
    chat_template: bool = True  # render prompts with the tokenizer's chat template
    system_prompt: str | None = None  # system message for the chat template
    train_file: Path  # any input the analysis commands read (JSONL, Parquet, datasets folder or id)
    eval_file: Path | None = None
    data_format: str | None = None  # field mapping of a public dataset (the CLI's --format)
    train_split: str | None = None  # split of a dataset train_file
    eval_split: str | None = None  # split of a dataset eval_file
    output_dir: Path
    seed: int = 42
    # grpo (no credit) by default: in the organism training study no credit source a user has
    # without a checker (rredcot, mc) beat grpo with its interval above 0 (studies/training/).
    advantage: Literal["grpo", "rredcot", "mc", "oracle", "shuffled", "method"] = "grpo"
    credit: CreditOptions = CreditOptions()
    rredcot: RredcotTrainingOptions = RredcotTrainingOptions()
    mc: McTrainingOptions = McTrainingOptions()
    oracle: OracleOptions = OracleOptions()
    method: MethodSourceOptions = MethodSourceOptions()
    lora: LoraOptions = LoraOptions()
    grpo: GrpoOptions = GrpoOptions()
    eval: EvalOptions = EvalOptions()

    _source: str = PrivateAttr("config")  # how error messages name the file

    @model_validator(mode="before")
    @classmethod
    def _moved_rredcot_keys(cls, data):
        """rredcot.segments / strength / floor / shuffle (before `credit`) still load."""
        rredcot = data.get("rredcot") if isinstance(data, dict) else None
        if not isinstance(rredcot, dict) or not {*rredcot} & {*_MOVED, "shuffle"}:
            return data
        rredcot = dict(rredcot)
        moved = {k: rredcot.pop(k) for k in _MOVED if k in rredcot}
        shuffle = rredcot.pop("shuffle", None)
        data = {**data, "rredcot": rredcot}
        credit = dict(data["credit"]) if isinstance(data.get("credit"), dict) else {}
        for key, value in moved.items():
            if key in credit:
                raise ValueError(f"rredcot.{key} and credit.{key} both set: keep credit.{key}")
            credit[key] = value
        if shuffle:
            if data.get("advantage", "rredcot") != "rredcot":
                raise ValueError("rredcot.shuffle needs advantage rredcot; write "
                                 "'advantage: shuffled' instead")
            data["advantage"] = "shuffled"
            credit.setdefault("shuffled", "rredcot")
        data["credit"] = credit
        warnings.warn(
            "train config: rredcot.segments/strength/floor/shuffle moved to credit.segments/"
            "strength/floor and 'advantage: shuffled'", DeprecationWarning, stacklevel=2)
        return data

    @model_validator(mode="after")
    def _source_needs(self):
        uses = self.credit.shuffled if self.advantage == "shuffled" else self.advantage
        if uses == "method":
            from cotcredit.training.method_credit import method_options

            method_options(self.method.name, self.method.options)  # checked before a model loads
        if uses == "oracle" and not self.oracle.regime:
            raise ValueError("the oracle credit needs 'oracle.regime' (a bench regime whose "
                             "checker judges the steps)")
        if uses == "oracle":
            from cotcredit.bench.regimes import REGIMES

            if self.oracle.regime not in REGIMES:
                raise ValueError(f"oracle.regime '{self.oracle.regime}' is no bench regime; "
                                 f"known: {', '.join(REGIMES)}")
        return self


# Keys that look like options but are not: the message says what to do instead.
_REMOVED_KEYS = {
    "max_prompt_length": "TRL 1.16's GRPOConfig has no max_prompt_length (prompts are not "
    "truncated); shorten long prompts in the data instead",
}


def _section_fields(model: type[BaseModel]) -> dict[str, type[BaseModel] | None]:
    out: dict[str, type[BaseModel] | None] = {}
    for name, info in model.model_fields.items():
        sub = info.annotation
        out[name] = sub if isinstance(sub, type) and issubclass(sub, BaseModel) else None
    return out


def _model_at(loc: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] | None = TrainConfig
    for part in loc:
        model = _section_fields(model).get(str(part)) if model is not None else None
    return model


def _unknown_key_message(loc: tuple) -> str:
    parent, key = tuple(str(p) for p in loc[:-1]), str(loc[-1])
    dotted = ".".join((*parent, key))
    prefix = "".join(f"{p}." for p in parent)
    if key in _REMOVED_KEYS:
        return f"unknown key '{dotted}': {_REMOVED_KEYS[key]}"
    model = _model_at(parent)
    candidates: dict[str, str] = {}  # name to match -> what to suggest
    if model is not None:
        candidates.update({name: prefix + name for name in model.model_fields})
    if not parent:  # a nested option written at the top level
        for section, sub in _section_fields(TrainConfig).items():
            if sub is not None:
                for name in sub.model_fields:
                    candidates.setdefault(name, f"{section}.{name}")
    if parent == ("grpo",) and key in grpo_config_fields():
        return f"unknown key '{dotted}': TRL option not listed here; put it under 'grpo.extra'"
    close = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    if close:
        return f"unknown key '{dotted}' (did you mean '{candidates[close[0]]}'?)"
    if key in candidates:  # exact name, wrong place
        return f"unknown key '{dotted}' (did you mean '{candidates[key]}'?)"
    return f"unknown key '{dotted}'"


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "dict": "a mapping (key: value lines)",
    "model": "a mapping (key: value lines)",
    "list": "a list",
}


def _error_message(error: dict) -> str:
    loc = tuple(error["loc"])
    kind = error["type"]
    ctx = error.get("ctx", {})
    where = ".".join(str(p) for p in loc)
    got = f" (got {_shown(error['input'])})" if "input" in error else ""
    if kind == "extra_forbidden":
        return _unknown_key_message(loc)
    if kind == "missing":
        return f"missing required key '{where}'"
    comparisons = {
        "greater_than": ("gt", ">"),
        "greater_than_equal": ("ge", ">="),
        "less_than": ("lt", "<"),
        "less_than_equal": ("le", "<="),
    }
    if kind in comparisons:
        key, op = comparisons[kind]
        bound = ctx[key]
        bound = int(bound) if isinstance(bound, float) and bound.is_integer() else bound
        return f"{where}: must be {op} {bound}{got}"
    if kind == "literal_error":
        return f"{where}: must be {ctx['expected']}{got}"
    if kind == "value_error" and not loc:  # a check of the whole config
        return str(ctx["error"])
    if kind == "value_error":  # a field's own check: its message says what is wanted
        return f"{where}: {ctx['error']}{'' if isinstance(error.get('input'), dict) else got}"
    if kind == "finite_number":
        return f"{where}: must be a finite number{got}"
    if kind == "int_from_float":
        return f"{where}: must be an integer{got}"
    for prefix, words in _TYPE_WORDS.items():
        if kind.startswith(prefix + "_"):
            return f"{where}: must be {words}{got}"
    msg = error["msg"]
    return f"{where}: {msg[:1].lower()}{msg[1:]}{got}"


def _clean_loc(loc: tuple) -> tuple:
    """Drop the union-member tags pydantic puts after a field ('str', 'list[str]', ...)."""
    out: list = []
    model: type[BaseModel] | None = TrainConfig
    for part in loc:
        if model is None and isinstance(part, str) and out:
            continue  # below a plain field every name is a union tag
        out.append(part)
        model = _section_fields(model).get(str(part)) if model is not None else None
    return tuple(out)


def _errors_in_order(exc: ValidationError) -> list[dict]:
    """Errors of a `str | list[str]` union come once per member; keep the first of a location."""
    seen: dict[tuple, dict] = {}
    for error in exc.errors():
        loc = tuple(error["loc"])
        loc = loc if error["type"] == "extra_forbidden" else _clean_loc(loc)
        seen.setdefault(loc, {**error, "loc": loc})
    return list(seen.values())


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    keys: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in keys:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}'", key_node.start_mark
            )
        keys.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: Path, source: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{source}: cannot read ({exc})") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""
        problem = re.sub(r"\s+", " ", str(exc.problem or exc.context or "syntax error")).strip()
        raise UserError(f"{source}:{where} invalid YAML ({problem})") from None
    except yaml.YAMLError as exc:
        problem = re.sub(r"\s+", " ", str(exc)).strip()
        raise UserError(f"{source}: invalid YAML ({problem})") from None


#: The fields of a config that name files or folders (the model: when it is one).
PATH_FIELDS = ("model", "train_file", "eval_file", "output_dir")
# A name ending so is a file, never a hub id ("Qwen3-0.6B" ends in ".6B": no file suffix).
_FILE_SUFFIXES = (".jsonl", ".json", ".gz", ".parquet", ".gguf")


def resolve_path(value: str | Path, base: Path, *, may_be_id: bool) -> str | Path:
    """`value` relative to the folder `base` (the config file's), as most tools read a config:
    ``~`` expanded, an absolute path kept, a relative one joined to `base` (lexically: "a/../b"
    is "b", links are kept). With `may_be_id`, a hub-style id ("openai/gsm8k",
    "Qwen/Qwen3-0.6B") that names no path there and does not look like one stays as written."""
    text = os.path.expanduser(str(value))
    if may_be_id and not os.path.isabs(text) and not (base / text).exists() and not (
        looks_like_path(str(value)) or Path(text).suffix in _FILE_SUFFIXES
    ):
        return value
    return type(value)(os.path.normpath(base / text))


def config_paths(cfg: TrainConfig, base: Path) -> dict[str, str | Path]:
    """Every path of `cfg` (`PATH_FIELDS`) resolved against `base` (`resolve_path`): the model
    and the data files may be hub ids, the output folder is always a path."""
    return {
        name: resolve_path(value, base, may_be_id=name != "output_dir")
        for name in PATH_FIELDS if (value := getattr(cfg, name)) is not None
    }


def load_config(path: str | Path) -> TrainConfig:
    """Read and validate a train config; any mistake raises ``UserError`` with a one-line message."""
    require("a train config", "train", ["trl"])  # read against TRL's GRPOConfig
    path = Path(path)
    source = str(path)
    data = _read_yaml(path, source)
    if data is None:
        raise UserError(f"{source}: empty config (it needs at least train_file and output_dir)")
    if not isinstance(data, dict):
        raise UserError(
            f"{source}: must be a mapping of keys (key: value lines), got {type(data).__name__}"
        )
    try:
        cfg = TrainConfig.model_validate(data)
    except ValidationError as exc:
        errors = _errors_in_order(exc)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise UserError(f"{source}: {_error_message(errors[0])}{more}") from None
    cfg = cfg.model_copy(update=config_paths(cfg, path.resolve().parent))
    cfg._source = source
    return cfg
