"""A checkpoint from elsewhere is hostile: its ``state.json``, ``rng.json`` and DCP ``.metadata`` may name
files outside it, devices, sizes or list indices that exhaust memory, or fields of the wrong types."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.parallel import Parallel
from videorl.runs.checkpoint import CheckpointError, CheckpointManager
from videorl.runs.manifest import file_crc32
from videorl.runs.resume import ActorState, resume


def _saved(tmp_path: Path) -> Path:
    model = torch.nn.Linear(3, 2)
    return CheckpointManager(tmp_path / "checkpoints").save(
        1, model_state=model.state_dict(), rng=None, data_state={"ranks": [{}]}
    )


def _rewrite(path: Path, edit: Any) -> None:
    """Change ``state.json`` of checkpoint ``path`` with ``edit(state)``."""
    state = json.loads((path / "state.json").read_text())
    edit(state)
    (path / "state.json").write_text(json.dumps(state))


def _tamper_metadata(path: Path, edit: Any) -> None:
    """Rewrite the DCP ``.metadata`` with ``edit(metadata)``, and ``state.json`` to match it (a tamperer who
    fixes the checksums)."""
    from videorl.runs.dcp_files import _MetadataUnpickler

    metadata_file = path / "tensors" / ".metadata"
    with open(metadata_file, "rb") as f:
        metadata = _MetadataUnpickler(f).load()
    edit(metadata)
    metadata_file.write_bytes(pickle.dumps(metadata))

    def fix(state: dict[str, Any]) -> None:
        state["files"]["tensors/.metadata"] = metadata_file.stat().st_size
        state["checksums"]["tensors/.metadata"] = file_crc32(metadata_file)

    _rewrite(path, fix)


@pytest.mark.parametrize("name", ["../outside.bin", "ABSOLUTE"])
def test_dcp_metadata_naming_a_file_outside_the_checkpoint_is_refused(tmp_path: Path, name: str) -> None:
    path = _saved(tmp_path)
    outside = tmp_path / "outside.bin"
    shard = next((path / "tensors").glob("*.distcp"))
    outside.write_bytes(shard.read_bytes())  # the same bytes: only the name differs
    target = str(outside) if name == "ABSOLUTE" else name

    def redirect(metadata: Any) -> None:
        for info in metadata.storage_data.values():
            info.relative_path = target

    _tamper_metadata(path, redirect)
    with pytest.raises(CheckpointError, match=f"names the file '{target}'.*does not checksum"):
        CheckpointManager(path.parent).load(path).model_state()


def test_state_json_listing_dev_zero_or_an_escape_is_refused_before_a_read(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    for name in ["/dev/zero", "../../etc/passwd", "tensors/../../x"]:
        _rewrite(
            path,
            lambda s, n=name: (s["files"].update({n: 1 << 40}), s["checksums"].update({n: "crc32:00000000"})),
        )
        with pytest.raises(CheckpointError, match="not a relative path inside the checkpoint"):
            CheckpointManager(path.parent).load(path)
        _rewrite(path, lambda s, n=name: (s["files"].pop(n), s["checksums"].pop(n)))
    (path / "zero").symlink_to("/dev/zero")  # a link inside the checkpoint is not followed either
    _rewrite(
        path, lambda s: (s["files"].update({"zero": 0}), s["checksums"].update({"zero": "crc32:00000000"}))
    )
    with pytest.raises(CheckpointError, match="zero is not a regular file"):
        CheckpointManager(path.parent).load(path)


def test_a_tiny_metadata_whose_planner_data_would_append_forever_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)

    def huge_index(metadata: Any) -> None:
        metadata.planner_data = {key: ("model", 10**12) for key in metadata.state_dict_metadata}

    _tamper_metadata(path, huge_index)
    assert (path / "tensors" / ".metadata").stat().st_size < 2048
    with pytest.raises(CheckpointError, match="planner_data names list indices far beyond"):
        CheckpointManager(path.parent).load(path).model_state()


def test_a_metadata_declaring_a_huge_tensor_is_refused_before_allocating(tmp_path: Path) -> None:
    path = _saved(tmp_path)

    def huge(metadata: Any) -> None:
        metadata.state_dict_metadata["model.weight"].size = torch.Size([1 << 30, 1 << 20])

    _tamper_metadata(path, huge)
    with pytest.raises(CheckpointError, match=r"'model.weight' is declared \[1073741824, 1048576\]"):
        CheckpointManager(path.parent).load(path).model_state()


def test_a_metadata_range_past_its_file_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)

    def past(metadata: Any) -> None:
        for info in metadata.storage_data.values():
            info.length = 1 << 40

    _tamper_metadata(path, past)
    with pytest.raises(CheckpointError, match="reads past"):
        CheckpointManager(path.parent).load(path).model_state()


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda s: s.update(files=[1, 2]), "'files' must be an object"),
        (
            lambda s: s["files"].update({"tensors/.metadata": "12"}),
            "'files.tensors/.metadata' must be a size",
        ),
        (lambda s: s.update(aliases={"a": 3}), "'aliases.a' must be a stored tensor name"),
        (lambda s: s.update(data={"ranks": "x"}), "'data.ranks' must be a list"),
        (lambda s: s["checksums"].update({"tensors/.metadata": 7}), "'checksums.tensors/.metadata' must be"),
    ],
)
def test_wrong_json_types_in_state_json_name_the_file_and_field(
    tmp_path: Path, edit: Any, field: str
) -> None:
    path = _saved(tmp_path)
    _rewrite(path, edit)
    with pytest.raises(CheckpointError) as info:
        CheckpointManager(path.parent).load(path)
    assert str(info.value).startswith(f"{path}/state.json: field ")
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("rng", "field"),
    [
        ({"ranks": {"0": 1}}, "'ranks' must be a list"),
        ({"ranks": [{"python": "x"}]}, "'ranks[0].python' must be"),
        ({"ranks": [{"python": [3, ["a"], None], "numpy": ["MT19937", [1], 0, 0, 0.0], "torch": []}]},
         "'ranks[0].python[1]' must be a list of integers"),
    ],
)  # fmt: skip
def test_wrong_json_types_in_rng_json_are_one_error_naming_the_field(
    tmp_path: Path, rng: Any, field: str
) -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    manager = CheckpointManager(tmp_path / "checkpoints")
    path = manager.save(
        1,
        model_state=ActorState(model, optimizer).state_dict()["model"],
        optimizer_state=ActorState(model, optimizer).state_dict()["optimizer"],
        data_state={"ranks": [{}]},
        rng={"python": [], "numpy": [], "torch": []},
    )
    (path / "rng.json").write_text(json.dumps(rng))
    _rewrite(path, lambda s: s["files"].update({"rng.json": (path / "rng.json").stat().st_size}))
    _rewrite(path, lambda s: s["checksums"].update({"rng.json": file_crc32(path / "rng.json")}))
    with pytest.raises(CheckpointError) as info:
        resume("auto", ActorState(model, optimizer), CheckpointManager(path.parent), Parallel())
    assert str(info.value).startswith(f"{path}/rng.json: field ")
    assert field in str(info.value)


def test_an_untampered_checkpoint_still_loads(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    state = CheckpointManager(path.parent).load(path).model_state()
    assert sorted(state) == ["bias", "weight"]
    assert os.path.isfile(path / "tensors" / ".metadata")
