"""The recorder engine keeps the engine contract on a tiny model and records its calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from videorl_engine_recorder.engine import RecorderEngine

from videorl.api import backend_for_model
from videorl.testing import assert_engine_contract


def test_the_recorder_keeps_the_engine_contract_and_records_its_calls(
    tmp_path: Path, run_cli: Any, videorl_plugins: Any
) -> None:
    run_cli("models", "tiny", "qwen2_5_vl", str(tmp_path / "model")).assert_success()
    backend = backend_for_model(tmp_path / "model", videorl_plugins(entry_points=True).model_backends)
    log = tmp_path / "calls.jsonl"
    assert_engine_contract(RecorderEngine, backend, options={"log": str(log)}, data_types=("text",))
    calls = [json.loads(line)["call"] for line in log.read_text().splitlines()]
    # the contract generates, refreshes and generates again; then a shared-module engine generates
    assert calls == ["generate", "update_weights", "generate", "generate"]
