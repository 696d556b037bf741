"""Paths in a config file are relative to the file's folder; a run's saved config survives a move."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from videorl.config import dump_config, load_config

CONFIG = """\
output_dir: ../runs/first
model:
  path: ../models/tiny
data:
  train_files: [data/train.jsonl, /abs/val.jsonl]
  cache_dir: ~/frames
  prompt_template: prompts/short.jinja
trainer:
  resume: auto
"""


def test_relative_paths_in_a_file_are_relative_to_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "project" / "configs"
    folder.mkdir(parents=True)
    (tmp_path / "project" / "models" / "tiny").mkdir(parents=True)
    (folder / "train.yaml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)  # somewhere else: the working directory does not matter
    c = load_config("project/configs/train.yaml", ["data.val_files=[here.jsonl]"])
    assert c.output_dir == str(tmp_path / "project" / "runs" / "first")
    assert c.model.path == str(tmp_path / "project" / "models" / "tiny")
    assert c.data.train_files == [str(folder / "data" / "train.jsonl"), "/abs/val.jsonl"]
    assert c.data.cache_dir == str(Path.home() / "frames")
    assert c.data.prompt_template == str(folder / "prompts" / "short.jinja")
    assert c.trainer.resume == "auto"  # not a path
    assert c.data.val_files == ["here.jsonl"]  # an override is relative to the working directory
    named = load_config(
        None, [f"model.path={tmp_path}", "data.train_files=[/t.jsonl]", "data.prompt_template=video_qa"]
    )
    (folder / "named.yaml").write_text(dump_config(named))
    assert load_config(folder / "named.yaml").data.prompt_template == "video_qa"  # a template name stays one


def test_a_runs_saved_config_names_its_own_folder_wherever_it_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    run = tmp_path / "runs" / "a"
    c = load_config(
        None,
        [
            "model.path=models/tiny",
            "data.train_files=[data/train.jsonl]",
            "output_dir=runs/a",
            f"trainer.resume={run / 'checkpoints' / 'step_000002'}",
        ],
    )
    run.mkdir(parents=True)
    text = dump_config(c, run)
    assert "output_dir: .\n" in text and "resume: checkpoints/step_000002\n" in text
    assert f"path: {tmp_path / 'models' / 'tiny'}\n" in text  # inputs outside the run: absolute
    (run / "config.yaml").write_text(text)
    moved = tmp_path / "elsewhere" / "b"
    moved.parent.mkdir()
    shutil.move(run, moved)
    monkeypatch.chdir(moved.parent)
    again = load_config(moved / "config.yaml")
    assert again.output_dir == str(moved)
    assert again.trainer.resume == str(moved / "checkpoints" / "step_000002")
    assert again.model.path == str(tmp_path / "models" / "tiny")
    assert again.data.train_files == [os.path.join(tmp_path, "data", "train.jsonl")]
