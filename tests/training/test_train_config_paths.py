"""One rule for every path in a train config: relative to the config file (a hub id that names
no path there stays an id), so a config runs the same from any working folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cotcredit.training.config import load_config, resolve_path


def _config(folder: Path, model: str) -> Path:
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    (folder / "ckpt").mkdir()
    (folder / "ckpt" / "config.json").write_text("{}")
    path = folder / "config.yaml"
    path.write_text(f"model: {model}\ntrain_file: data/train.jsonl\neval_file: data/train.jsonl\n"
                    "output_dir: runs/a\n")
    return path


@pytest.mark.parametrize("model", ["ckpt", "./ckpt", "ckpt/"])
def test_every_path_is_relative_to_the_config_from_any_working_folder(tmp_path, monkeypatch,
                                                                        model):
    folder = tmp_path / "project"
    config = _config(folder, model)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd, given in ((folder, Path("config.yaml")), (elsewhere, config),
                       (elsewhere, Path(os.path.relpath(config, elsewhere)))):
        monkeypatch.chdir(cwd)
        cfg = load_config(given)
        assert Path(cfg.model) == folder / "ckpt"
        assert cfg.train_file == cfg.eval_file == folder / "data" / "train.jsonl"
        assert cfg.output_dir == folder / "runs" / "a"


def test_a_hub_id_stays_an_id_and_a_missing_path_stays_a_path(tmp_path):
    assert resolve_path("Qwen/Qwen3-0.6B", tmp_path, may_be_id=True) == "Qwen/Qwen3-0.6B"
    assert resolve_path(Path("openai/gsm8k"), tmp_path, may_be_id=True) == Path("openai/gsm8k")
    # Looks like a path (or exists under the config's folder): resolved, so a missing one is
    # reported as a missing path, not tried on the hub.
    for value in ("./ckpt", "models/org/name", "model.gguf"):
        assert resolve_path(value, tmp_path, may_be_id=True) == str(tmp_path / value)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert resolve_path("org/name", tmp_path, may_be_id=True) == str(tmp_path / "org" / "name")
    assert resolve_path("runs/a", tmp_path, may_be_id=False) == str(tmp_path / "runs" / "a")
    home = resolve_path("~/models/x", tmp_path, may_be_id=True)
    assert home == os.path.expanduser("~/models/x")


def test_a_model_folder_missing_next_to_the_config_is_named_in_the_error(tmp_path, monkeypatch):
    """`cotcredit train config.yaml` typed in the config's own folder finds `model: ./ckpt`; a
    missing one is one line naming the resolved path."""
    from cotcredit.errors import UserError
    from cotcredit.lm.loading import locate_model

    folder = tmp_path / "project"
    config = _config(folder, "./nope")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(config)
    with pytest.raises(UserError, match="no such folder or file"):
        locate_model(cfg.model)
    assert cfg.model == str(folder / "nope")
