"""``videorl export``: a checkpoint of a real (tiny) run becomes a plain HF model directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-step run of the demo task with a checkpoint after each step."""
    from videorl import demo
    from videorl.config import load_config
    from videorl.plugins import load_plugins
    from videorl.train.compose import build_training

    out = tmp_path_factory.mktemp("export")
    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_5_vl", seed=0, train=2, val=1)
    overrides = [
        *demo.demo_overrides(out, model, train, val, steps=2, seed=1, engine="hf"),
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=4",
        "trainer.save_every=1",
        "trainer.val_every=0",
        "trainer.progress_bar=false",
    ]
    build_training(load_config(None, overrides), load_plugins()).run()
    return out / "run"


def _export(*args: str) -> Any:
    from click.testing import CliRunner

    from videorl.cli import make_cli
    from videorl.plugins import load_plugins

    return CliRunner().invoke(make_cli(load_plugins()), ["export", *args])


def test_export_of_a_run_loads_with_from_pretrained_and_holds_the_latest_weights(
    run: Path, tmp_path: Path
) -> None:
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from videorl.runs.checkpoint import CheckpointManager

    result = _export(str(run), str(tmp_path / "hf"))
    assert result.exit_code == 0, result.output
    assert "step_000002" in result.output  # the latest checkpoint
    model = AutoModelForImageTextToText.from_pretrained(str(tmp_path / "hf"), dtype=torch.float32)
    AutoProcessor.from_pretrained(str(tmp_path / "hf"))  # tokenizer and processor came along
    state = CheckpointManager(run / "checkpoints").load(run / "checkpoints" / "step_000002").model_state()
    loaded = model.state_dict()
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    base = AutoModelForImageTextToText.from_pretrained(
        str(run.parent / "model"), dtype=torch.float32
    ).state_dict()
    assert any(not torch.equal(loaded[k], base[k]) for k in base)  # trained weights, not the base model's


def test_export_of_one_checkpoint_and_refusals(run: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from videorl.runs.checkpoint import CheckpointManager

    first = run / "checkpoints" / "step_000001"
    assert _export(str(first), str(tmp_path / "hf1")).exit_code == 0
    exported = load_file(str(tmp_path / "hf1" / "model.safetensors"))
    state = CheckpointManager(first.parent).load(first).model_state()
    assert exported.keys() == state.keys() and all((exported[k] == state[k]).all() for k in state)

    again = _export(str(first), str(tmp_path / "hf1"))
    assert again.exit_code != 0 and "--overwrite" in again.output
    assert _export(str(first), str(tmp_path / "hf1"), "--overwrite").exit_code == 0
    empty = tmp_path / "empty-run"
    (empty / "checkpoints").mkdir(parents=True)
    refused = _export(str(empty), str(tmp_path / "hf2"))
    assert refused.exit_code != 0 and "holds no complete checkpoint" in refused.output


def test_export_into_the_run_is_refused_and_the_run_survives(run: Path, tmp_path: Path) -> None:
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    for out in (run, run / "checkpoints", run / "checkpoints" / "step_000002"):
        result = _export(str(run), str(out), "--overwrite")
        assert result.exit_code != 0
        assert "the run" in result.output and "export to a folder outside it" in result.output, result.output
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before
    unrelated = tmp_path / "notes"
    unrelated.mkdir()
    (unrelated / "todo.txt").write_text("keep me")
    refused = _export(str(run), str(unrelated), "--overwrite")
    assert refused.exit_code != 0 and "was not written by videorl export" in refused.output
    assert (unrelated / "todo.txt").read_text() == "keep me"


def test_export_of_a_run_whose_latest_checkpoint_is_corrupt_takes_the_previous_one(
    run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    metadata = copy / "checkpoints" / "step_000002" / "tensors" / ".metadata"
    data = bytearray(metadata.read_bytes())
    data[10] ^= 0xFF  # same size, damaged index of the shards
    metadata.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="videorl.checkpoint"):
        result = _export(str(copy), str(tmp_path / "hf"))
    assert result.exit_code == 0, result.output
    assert f"exported {copy / 'checkpoints' / 'step_000001'}" in result.output
    assert "step_000002" in caplog.text and "corrupt" in caplog.text


@pytest.mark.parametrize("change", ["intermediate_size", "vision_depth"])
def test_export_refuses_a_base_model_of_another_shape_or_depth(
    run: Path, tmp_path: Path, change: str
) -> None:
    """The export would load, with the tensors the base lacks (or reshapes) initialised afresh."""
    import json
    import shutil

    other = tmp_path / "other"
    shutil.copytree(run.parent / "model", other)
    config = json.loads((other / "config.json").read_text())
    section = config.get("text_config", config) if "intermediate_size" not in config else config
    if change == "intermediate_size":
        section["intermediate_size"] = int(section["intermediate_size"]) * 2
    else:  # one more vision block: tensors the checkpoint lacks, which would load initialised afresh
        config["vision_config"]["depth"] = int(config["vision_config"].get("depth", 2)) + 1
    (other / "config.json").write_text(json.dumps(config))
    result = _export(str(run), str(tmp_path / "hf"), "--base-model", str(other))
    assert result.exit_code != 0
    assert f"{other} is not the model" in result.output and "--base-model" in result.output
    if change == "intermediate_size":
        assert "tensor(s) have another shape" in result.output
    else:
        assert "tensor(s) of the base are not in the checkpoint" in result.output
    assert not (tmp_path / "hf").exists()
