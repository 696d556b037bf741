"""``model.path`` and ``videorl eval run --model`` as Hub ids, resolved from a hub cache built in a temp
HF_HOME."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from videorl.config import TrainConfig, load_config
from videorl.errors import ConfigError
from videorl.plugins import load_plugins
from videorl.train.compose import make_backend

REVISION = "0123456789abcdef0123456789abcdef01234567"


def hub_cache_model(hf_home: Path, repo_id: str, model: Path) -> Path:
    """``model``'s files laid out as ``hf download`` leaves them: blobs, snapshot symlinks, refs/main."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    for file in sorted(p for p in model.rglob("*") if p.is_file()):
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / file.relative_to(model)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


@pytest.fixture
def hub(tmp_path: Path, tiny_model_dir: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """The snapshot of ``tiny-org/tiny-vl`` in a fresh HF_HOME, offline."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hub_cache_model(tmp_path / "hf", "tiny-org/tiny-vl", tiny_model_dir("qwen2_5_vl"))


def _train_config(tmp_path: Path, model: str) -> Path:
    (tmp_path / "configs").mkdir(exist_ok=True)
    path = tmp_path / "configs" / "train.yaml"
    path.write_text(f"model:\n  path: {model}\ndata:\n  train_files: [train.jsonl]\n")
    return path


def test_a_hub_id_in_model_path_is_its_cached_snapshot(hub: Path, tmp_path: Path) -> None:
    config: TrainConfig = load_config(_train_config(tmp_path, "tiny-org/tiny-vl"))
    assert config.model.path == str(hub)  # not configs/tiny-org/tiny-vl
    assert (Path(config.model.path) / "config.json").is_file()
    assert config.data.train_files == [str(tmp_path / "configs" / "train.jsonl")]
    overridden: TrainConfig = load_config(_train_config(tmp_path, "x"), ["model.path=tiny-org/tiny-vl"])
    assert overridden.model.path == str(hub)


def test_a_local_folder_named_like_an_id_wins(hub: Path, tmp_path: Path) -> None:
    local = tmp_path / "configs" / "tiny-org" / "tiny-vl"
    local.mkdir(parents=True)
    assert load_config(_train_config(tmp_path, "tiny-org/tiny-vl")).model.path == str(local)


def test_a_missing_snapshot_names_the_id_and_the_download_command(hub: Path, tmp_path: Path) -> None:
    config: TrainConfig = load_config(_train_config(tmp_path, "tiny-org/absent-vl"))
    assert config.model.path == "tiny-org/absent-vl"  # checked, printed or planned without the model
    with pytest.raises(ConfigError) as caught:
        make_backend(config, load_plugins())
    message = str(caught.value)
    assert "tiny-org/absent-vl: no such folder, and the Hub model tiny-org/absent-vl is not in the" in message
    assert f"({tmp_path / 'hf' / 'hub'}); download it first: hf download tiny-org/absent-vl" in message


def test_eval_run_accepts_a_hub_id(hub: Path, tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    root = tmp_path / "mvbench"
    (root / "json").mkdir(parents=True)
    row = {"video": "absent.mp4", "question": "Is it there?", "candidates": ["yes", "no"], "answer": "yes"}
    (root / "json" / "object_existence.json").write_text(json.dumps([row], indent=2))
    out = tmp_path / "run"
    result = run_cli("eval", "run", "--model", "tiny-org/tiny-vl", "--benchmark", "mvbench", "--data-root",
                     str(root), "--out", str(out), "--max-tokens", "2", "--quiet")  # fmt: skip
    result.assert_success()
    settings = json.loads((out / "results.json").read_text())["settings"]
    assert settings["model"] == {"path": str(hub.resolve()), "family": "qwen2_5_vl"}
    missing = run_cli("eval", "run", "--model", "tiny-org/absent-vl", "--benchmark", "mvbench", "--data-root",
                      str(root), "--out", str(tmp_path / "run2"), "--quiet")  # fmt: skip
    assert missing.exit_code != 0 and "hf download tiny-org/absent-vl" in missing.stderr


@pytest.mark.slow
def test_eval_run_logs_its_summary_to_a_tracker(
    hub: Path, tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow.tracking import MlflowClient

    root = tmp_path / "mvbench"
    (root / "json").mkdir(parents=True)
    row = {"video": "absent.mp4", "question": "Is it there?", "candidates": ["yes", "no"], "answer": "yes"}
    (root / "json" / "object_existence.json").write_text(
        json.dumps([row, {**row, "question": "Again?"}], indent=2)
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = run_cli("eval", "run", "--model", "tiny-org/tiny-vl", "--benchmark", "mvbench", "--data-root",
                     str(root),
                     "--out", str(tmp_path / "run"), "--max-tokens", "2", "--quiet", "--logger", "mlflow",
                     "--logger-option", f"mlflow.tracking_uri={uri}", "--logger-option",
                     "mlflow.experiment=evals",
                     "--logger-option", f"mlflow.artifact_location={tmp_path / 'artifacts'}")  # fmt: skip
    result.assert_success()
    summary = json.loads((tmp_path / "run" / "results.json").read_text())["benchmarks"]["mvbench"]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("evals")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags["videorl.kind"] == "eval" and run.info.status == "FINISHED"
    assert run.data.metrics["mvbench/overall"] == summary["overall"] == 0.0  # both videos are missing
    assert run.data.metrics["mvbench/n"] == 2 and run.data.metrics["mvbench/n_failed"] == 2
    assert run.data.params["model.path"] == str(hub.resolve())
    assert run.data.metrics["mvbench/metrics/accuracy _pooled_"] == summary["metrics"]["accuracy (pooled)"]
