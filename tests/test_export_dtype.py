"""``videorl export`` writes the weights in the run's ``model.dtype`` (or ``--dtype``), and the exported
``config.json`` says so: a full fine-tuning run's float32 master weights, cast once, tied tensors still
stored once. (A LoRA run's merged and adapter exports: tests/test_lora.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from videorl.cli import make_cli
    from videorl.plugins import load_plugins

    return CliRunner().invoke(make_cli(load_plugins()), list(args), catch_exceptions=False)


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """A run directory of a bfloat16 run: config.yaml, and a checkpoint of float32 master weights (a tiny
    Qwen2 with tied embeddings) trained away from its base model."""
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen2Config(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config)
    base = tmp_path / "base"
    model.save_pretrained(base)
    with torch.no_grad():  # "training" moved the weights (to values bfloat16 cannot hold exactly)
        for p in model.parameters():
            p.add_(1 + 1e-4)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(
        f"model:\n  path: {base}\n  dtype: bfloat16\ndata:\n  train_files: [{tmp_path / 'train.jsonl'}]\n"
    )
    from videorl.runs.checkpoint import CheckpointManager

    CheckpointManager(run / "checkpoints").save(3, model_state=model.state_dict())
    return run, {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_export_writes_the_runs_model_dtype_and_config_json_says_it(
    run: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    run_dir, masters = run
    assert all(t.dtype == torch.float32 for t in masters.values())
    out = tmp_path / "hf"
    result = _cli("export", str(run_dir), str(out))
    assert result.exit_code == 0, result.output
    written = load_file(str(out / "model.safetensors"))
    assert "lm_head.weight" not in written  # tied to the embeddings: stored once, as save_pretrained does
    assert written.keys() == masters.keys() - {"lm_head.weight"}
    for name, tensor in written.items():
        assert tensor.dtype == torch.bfloat16, name
        assert torch.equal(tensor, masters[name].to(torch.bfloat16)), name
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == "bfloat16"
    assert json.loads((out / ".videorl-export.json").read_text())["dtype"] == "bfloat16"
    loaded = AutoModelForCausalLM.from_pretrained(out, dtype="auto")
    assert loaded.dtype == torch.bfloat16
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()

    # --dtype float32 keeps the master weights exactly
    result = _cli("export", str(run_dir), str(out), "--dtype", "float32", "--overwrite")
    assert result.exit_code == 0, result.output
    written = load_file(str(out / "model.safetensors"))
    assert all(torch.equal(t, masters[name]) for name, t in written.items())
    assert any(not torch.equal(t.to(torch.bfloat16).float(), t) for t in written.values())
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"


def test_export_of_a_checkpoint_outside_its_run_writes_what_it_holds(
    run: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    """No config.yaml to say model.dtype: the weights as stored (float32), and config.json as the base's."""
    from safetensors.torch import load_file

    run_dir, masters = run
    (run_dir / "config.yaml").unlink()
    out = tmp_path / "hf"
    checkpoint = run_dir / "checkpoints" / "step_000003"
    result = _cli("export", str(checkpoint), str(out), "--base-model", str(run_dir.parent / "base"))
    assert result.exit_code == 0, result.output
    written = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.float32 and torch.equal(t, masters[n]) for n, t in written.items())
    assert json.loads((out / "config.json").read_text()) == json.loads(
        (run_dir.parent / "base" / "config.json").read_text()
    )
