"""The train config: YAML loading, one-line errors, and the hand-over to TRL's GRPOConfig."""

from pathlib import Path

import pytest

from cotcredit.errors import UserError
from cotcredit.training.config import TrainConfig, load_config
from cotcredit.training.trl_config import grpo_kwargs, to_grpo_config

MINIMAL = "train_file: data/train.jsonl\noutput_dir: runs/x\n"


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(UserError) as info:
        to_grpo_config(load_config(path))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message[len(f"{path}: ") :]


def test_minimal_config_defaults_and_paths_relative_to_the_config(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL))
    assert isinstance(cfg, TrainConfig)
    assert cfg.train_file == tmp_path / "data" / "train.jsonl"
    assert cfg.output_dir == tmp_path / "runs" / "x"
    assert cfg.eval_file is None and cfg.model is None
    assert cfg.advantage == "grpo" and cfg.seed == 42
    assert cfg.credit.segments == 8 and cfg.rredcot.value == "rhat"
    assert (cfg.credit.form, cfg.credit.strength, cfg.credit.floor) == ("reweight", 3.0, 0.0)


def test_segments_take_a_count_or_lines(tmp_path):
    assert load_config(write(tmp_path, MINIMAL + "credit:\n  segments: lines\n")).credit.segments == "lines"
    assert load_config(write(tmp_path, MINIMAL + "credit:\n  segments: 5\n")).credit.segments == 5


def test_older_rredcot_keys_still_load_as_credit_options(tmp_path):
    text = MINIMAL + "rredcot:\n  segments: lines\n  strength: 2\n  floor: 0.5\n  shuffle: true\n"
    with pytest.warns(DeprecationWarning, match="moved to credit"):
        cfg = load_config(write(tmp_path, text))
    assert (cfg.credit.segments, cfg.credit.strength, cfg.credit.floor) == ("lines", 2.0, 0.5)
    assert cfg.advantage == "shuffled" and cfg.credit.shuffled == "rredcot"
    both = MINIMAL + "credit: {strength: 1}\nrredcot: {strength: 2}\n"
    assert error_of(tmp_path, both) == "rredcot.strength and credit.strength both set: keep credit.strength"
    assert error_of(tmp_path, MINIMAL + "advantage: grpo\nrredcot: {shuffle: true}\n") == (
        "rredcot.shuffle needs advantage rredcot; write 'advantage: shuffled' instead")


def test_credit_sources_and_their_sections(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL + (
        "advantage: shuffled\ncredit: {form: segment-rewards, shuffled: oracle}\n"
        "oracle: {regime: multipath}\nmc: {rollouts: 2, max_boundaries: 3}\n")))
    assert (cfg.advantage, cfg.credit.form, cfg.oracle.regime) == ("shuffled", "segment-rewards",
                                                                  "multipath")
    assert (cfg.mc.rollouts, cfg.mc.max_boundaries, cfg.mc.temperature) == (2, 3, None)
    assert cfg.oracle.span == "rest"  # the default: today's oracle
    first = load_config(write(tmp_path, MINIMAL + (
        "advantage: oracle\ncredit: {form: segment-rewards}\n"
        "oracle: {regime: unique, span: first}\n")))
    assert (first.advantage, first.credit.form, first.oracle.span) == (
        "oracle", "segment-rewards", "first")
    assert error_of(tmp_path, MINIMAL + "oracle: {regime: unique, span: all}\n") == (
        "oracle.span: must be 'rest' or 'first' (got 'all')")
    assert error_of(tmp_path, MINIMAL + "advantage: oracle\n") == (
        "the oracle credit needs 'oracle.regime' (a bench regime whose checker judges the steps)")
    assert error_of(tmp_path, MINIMAL + "advantage: oracle\noracle: {regime: nope}\n").startswith(
        "oracle.regime 'nope' is no bench regime; known: unique, multipath")


def test_the_method_source_takes_any_registered_method_and_its_options(tmp_path):
    from cotcredit.methods.mc import McOptions

    auto = "{rollouts: auto, rollout_budget: 4, first_round: ends, prior: paths}"
    cfg = load_config(write(tmp_path, MINIMAL + f"advantage: method\nmethod: {{name: mc, "
                                                f"options: {auto}}}\n"))
    assert (cfg.advantage, cfg.method.name) == ("method", "mc")
    from cotcredit.training.method_credit import method_options

    assert method_options("mc", cfg.method.options) == McOptions(
        rollouts="auto", rollout_budget=4, first_round="ends", prior="paths")
    assert load_config(write(tmp_path, MINIMAL + "advantage: method\nmethod: {name: mc, options: "
                             "{rollouts: 4, horizon: 32}}\n")).method.options["horizon"] == 32
    assert error_of(tmp_path, MINIMAL + "advantage: method\n") == (
        "the method credit needs 'method.name' (a registered method, e.g. value-head or mc)")
    assert error_of(tmp_path, MINIMAL + "advantage: method\nmethod: {name: nope}\n").startswith(
        "unknown method 'nope' (known: ")
    assert error_of(tmp_path, MINIMAL + "advantage: method\nmethod: {name: mc, options: "
                    "{rolouts: 3}}\n").startswith("method.options: unknown option 'rolouts'")
    assert error_of(tmp_path, MINIMAL + "advantage: method\nmethod: {name: value-head}\n"
                    ).startswith("value-head needs a fitted head")


def test_rredcot_takes_any_rredcot_option(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL + (
        "rredcot: {value: both, space: log, vhat_weight: 0.5, solution-part: whole, "
        "exit_string: 'So: '}\n")))
    options = cfg.rredcot.options()
    assert (options.value, options.space, options.vhat_weight) == ("both", "log", 0.5)
    assert options.solution_part == "whole" and options.sum_to == "advantage"
    assert options.forcing.exit_string == "So: "
    assert error_of(tmp_path, MINIMAL + "rredcot: {spcae: log}\n") == (
        "rredcot: unknown key 'rredcot.spcae' (did you mean 'rredcot.space'?)")
    assert error_of(tmp_path, MINIMAL + "rredcot: {sum_to: return}\n") == (
        "rredcot: 'sum_to' cannot be set here: training redistributes ζ − g_0 "
        "(sum_to: advantage)")
    assert error_of(tmp_path, MINIMAL + "rredcot: {space: linear}\n").startswith("rredcot: ")


def test_absolute_paths_are_kept(tmp_path):
    cfg = load_config(write(tmp_path, f"train_file: /abs/t.jsonl\noutput_dir: {tmp_path}/o\n"))
    assert cfg.train_file == Path("/abs/t.jsonl") and cfg.output_dir == tmp_path / "o"


def test_round_trip_to_grpo_config(tmp_path):
    text = MINIMAL + (
        "seed: 7\n"
        "advantage: grpo\n"
        "credit:\n  strength: 2.5\n  floor: 0.1\n"
        "rredcot:\n  exit_string: '</think> Answer: '\n"
        "grpo:\n"
        "  num_generations: 4\n  max_completion_length: 64\n  temperature: 0.7\n  beta: 0.04\n"
        "  epsilon: 0.3\n  learning_rate: 1e-5\n  per_device_train_batch_size: 4\n"
        "  gradient_accumulation_steps: 2\n  max_steps: 10\n  logging_steps: 1\n  save_steps: 5\n"
        "  use_vllm: false\n  report_to: none\n  bf16: false\n  loss_type: grpo\n"
        "  scale_rewards: none\n  gradient_checkpointing: false\n"
        "  extra: {top_p: 0.9, warmup_steps: 2}\n"
    )
    cfg = load_config(write(tmp_path, text))
    assert cfg.advantage == "grpo" and cfg.credit.strength == 2.5 and cfg.credit.floor == 0.1
    assert cfg.grpo.learning_rate == 1e-5  # YAML reads 1e-5 as a string; pydantic parses it
    args = to_grpo_config(cfg)
    assert args.output_dir == str(tmp_path / "runs" / "x") and args.seed == 7
    assert (args.num_generations, args.max_completion_length) == (4, 64)
    assert (args.temperature, args.beta, args.epsilon, args.learning_rate) == (0.7, 0.04, 0.3, 1e-5)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 2)
    assert (args.max_steps, args.logging_steps, args.save_steps) == (10, 1, 5)
    assert args.use_vllm is False and args.bf16 is False and args.report_to == []
    assert (args.loss_type, args.scale_rewards) == ("grpo", "none")
    assert args.gradient_checkpointing is False
    assert (args.top_p, args.warmup_steps) == (0.9, 2)


@pytest.mark.parametrize("renamed", [True, False])
def test_gradient_checkpointing_goes_under_the_name_grpo_config_takes(tmp_path, monkeypatch,
                                                                      renamed):
    """transformers 5.24 renamed it activation_checkpointing; before, only the old name is a
    field (passing the new one failed every run on transformers 5.17)."""
    from cotcredit.training import trl_config

    fields = trl_config.grpo_config_fields() - {"activation_checkpointing"}
    if renamed:
        fields = fields | {"activation_checkpointing"}
    monkeypatch.setattr(trl_config, "grpo_config_fields", lambda: fields)
    cfg = load_config(write(tmp_path, MINIMAL + "grpo:\n  gradient_checkpointing: true\n"))
    kwargs = grpo_kwargs(cfg)
    name = "activation_checkpointing" if renamed else "gradient_checkpointing"
    other = "gradient_checkpointing" if renamed else "activation_checkpointing"
    assert kwargs[name] is True and other not in kwargs


def test_omitted_grpo_options_keep_trl_defaults(tmp_path):
    import trl

    args = to_grpo_config(load_config(write(tmp_path, MINIMAL)))
    default = trl.GRPOConfig(output_dir=str(tmp_path), bf16=False)
    for name in ("num_generations", "max_completion_length", "learning_rate", "beta", "loss_type"):
        assert getattr(args, name) == getattr(default, name)
    assert args.bf16 is False  # no bf16 GPU here; TRL's own default (True) fails on CPU


def test_empty_sections_mean_defaults(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL + "rredcot:\ncredit:\ngrpo:\n"))
    assert cfg.credit.segments == 8 and cfg.grpo.num_generations is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("learnig_rate: 1\n", "unknown key 'learnig_rate' (did you mean 'grpo.learning_rate'?)"),
        (
            "grpo:\n  learnig_rate: 1\n",
            "unknown key 'grpo.learnig_rate' (did you mean 'grpo.learning_rate'?)",
        ),
        ("segmnets: 4\n", "unknown key 'segmnets' (did you mean 'credit.segments'?)"),
        (
            "credit:\n  strenght: 1\n",
            "unknown key 'credit.strenght' (did you mean 'credit.strength'?)",
        ),
        ("sed: 1\n", "unknown key 'sed' (did you mean 'seed'?)"),
        ("zzz: 1\n", "unknown key 'zzz'"),
        (
            "grpo:\n  top_p: 0.9\n",
            "unknown key 'grpo.top_p': TRL option not listed here; put it under 'grpo.extra'",
        ),
        ("grpo:\n  temperature: 0\n", "grpo.temperature: must be > 0 (got 0)"),
        ("credit:\n  segments: 0\n",
         "credit.segments: must be a positive integer or 'lines' (got 0)"),
        ("credit:\n  segments: line\n",
         "credit.segments: must be a positive integer or 'lines' (got 'line')"),
        ("credit:\n  segments: 2.5\n",
         "credit.segments: must be a positive integer or 'lines' (got 2.5)"),
        ("credit:\n  form: rudder\n",
         "credit.form: must be 'reweight' or 'segment-rewards' (got 'rudder')"),
        ("grpo:\n  num_generations: 1\n", "grpo.num_generations: must be >= 2 (got 1)"),
        ("grpo:\n  num_generations: 2.5\n", "grpo.num_generations: must be an integer (got 2.5)"),
        ("grpo:\n  learning_rate: fast\n", "grpo.learning_rate: must be a number (got 'fast')"),
        ("grpo:\n  use_vllm: maybe\n", "grpo.use_vllm: must be true or false (got 'maybe')"),
        ("grpo:\n  report_to: 5\n", "grpo.report_to: must be a string (got 5)"),
        ("grpo: 3\n", "grpo: must be a mapping (key: value lines) (got 3)"),
        ("advantage: rudder\n",
         "advantage: must be 'grpo', 'rredcot', 'mc', 'oracle', 'shuffled' or 'method' "
         "(got 'rudder')"),
        ("mc:\n  rollouts: 0\n", "mc.rollouts: must be >= 1 (got 0)"),
        (
            "rredcot:\n  value: qhat\n",
            "rredcot.value: must be 'rhat', 'vhat' or 'both' (got 'qhat')",
        ),
        ("credit:\n  floor: 1.5\n", "credit.floor: must be <= 1 (got 1.5)"),
        ("credit:\n  strength: .inf\n", "credit.strength: must be a finite number (got inf)"),
        ("model: 5\n", "model: must be a string (got 5)"),
    ],
)
def test_bad_values_and_unknown_keys(tmp_path, text, expected):
    assert error_of(tmp_path, MINIMAL + text) == expected


def test_removed_trl_option_is_explained(tmp_path):
    message = error_of(tmp_path, MINIMAL + "grpo:\n  max_prompt_length: 256\n")
    assert message.startswith("unknown key 'grpo.max_prompt_length': TRL 1.16")


def test_missing_required_key(tmp_path):
    assert error_of(tmp_path, "output_dir: out\n") == "missing required key 'train_file'"
    assert error_of(tmp_path, "seed: 1\n") == "missing required key 'train_file' (and 1 more)"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (MINIMAL + "grpo:\n  temperature: 1\n   beta: 2\n", 5),
        ("train_file: [a.jsonl\noutput_dir: out\n", 2),
        (MINIMAL + "seed: 1\nseed: 2\n", 4),  # duplicate keys are refused, not silently merged
        ("train_file: a\n\toutput_dir: out\n", 2),
    ],
)
def test_bad_yaml_reports_its_line(tmp_path, text, line):
    message = error_of(tmp_path, text)
    assert message.startswith(f"line {line}, column ") and "invalid YAML (" in message


def test_not_a_mapping_empty_and_missing_file(tmp_path):
    assert error_of(tmp_path, "- a\n- b\n").startswith("must be a mapping")
    assert error_of(tmp_path, "# nothing\n").startswith("empty config")
    with pytest.raises(UserError, match=r"nope\.yaml: no such file"):
        load_config(tmp_path / "nope.yaml")


def test_trl_consistency_errors_become_user_errors(tmp_path):
    text = MINIMAL + "grpo:\n  num_generations: 3\n  per_device_train_batch_size: 4\n"
    message = error_of(tmp_path, text)
    assert message.startswith(
        "grpo: generation_batch_size (4) must be divisible by num_generations"
    )


def test_extra_options_are_checked_against_grpo_config(tmp_path):
    message = error_of(tmp_path, MINIMAL + "grpo:\n  extra: {top_pp: 0.9}\n")
    assert (
        message
        == "grpo.extra: 'top_pp' is not a GRPOConfig option (did you mean 'grpo.extra.top_p'?)"
    )
    message = error_of(tmp_path, MINIMAL + "grpo:\n  extra: {beta: 0.1}\n")
    assert message == "grpo.extra.beta: set it as 'grpo.beta' instead"
    message = error_of(tmp_path, MINIMAL + "grpo:\n  extra: {seed: 3}\n")
    assert message == "grpo.extra.seed: set it as 'seed' instead"


def test_data_files_are_read_like_analysis_inputs(tmp_path):
    """train_file may be Parquet (or any reader input) with a --format preset and a split; a
    dataset id that is no path next to the config is kept as written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cotcredit.data.problems import load_problems

    rows = [{"question": "Two plus two?", "answer": "2 + 2 = 4.\n#### 4"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "gsm8k.parquet")
    cfg = load_config(write(tmp_path, "train_file: gsm8k.parquet\ndata_format: gsm8k\n"
                                      "eval_file: openai/gsm8k\neval_split: test\noutput_dir: o\n"))
    assert cfg.train_file == tmp_path / "gsm8k.parquet" and cfg.eval_file == Path("openai/gsm8k")
    (p,) = load_problems(cfg.train_file, cfg.data_format, cfg.train_split)
    assert (p.prompt, p.answer, p.solution) == ("Two plus two?", "4", rows[0]["answer"])



def test_the_trl_builders_keep_their_names_of_0_2():
    """``to_grpo_config`` and its siblings live in ``training.trl_config``; ``training.config``
    still gives them under the names of 0.2."""
    from cotcredit.training import config as config_module
    from cotcredit.training import trl_config

    for name in ("grpo_kwargs", "lora_config", "to_grpo_config"):
        assert getattr(config_module, name) is getattr(trl_config, name)
