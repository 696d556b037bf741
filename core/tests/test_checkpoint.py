"""Checkpoints: atomic writes (a writer killed with SIGKILL), resume, retention, RNG, export to HF."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import videorl.runs.checkpoint as ck
from videorl.atomic import DiskFullError
from videorl.errors import ConfigError
from videorl.parallel import Parallel
from videorl.runs.checkpoint import Checkpoint, CheckpointError, CheckpointManager
from videorl.runs.dcp_files import safe_reader
from videorl.runs.export import export_hf_model
from videorl.runs.manifest import checked_files, file_crc32, read_manifest
from videorl.runs.resume import ActorState, resume, save_checkpoint
from videorl.runs.tensors import capture_rng_state, restore_rng_state


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path / "checkpoints")
    manager.write(
        3,
        ActorState(model, optimizer).state_dict(),
        Parallel(),
        data={"epoch": 1, "index": 12},
        rng=[capture_rng_state(), capture_rng_state()],
        extra={"config_hash": "abc"},
        asynchronous=False,
    )
    path = manager.path_for(3)
    assert sorted(p.name for p in path.iterdir()) == ["rng.json", "state.json", "tensors"]
    assert sorted(p.name for p in (path / "tensors").iterdir()) == [".metadata", "__0_0.distcp"]
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step_000003\n"
    resumed = manager.resolve_resume("auto")
    assert resumed is not None
    ckpt = manager.load(resumed)
    assert (ckpt.step, ckpt.data_state, ckpt.extra) == (3, {"epoch": 1, "index": 12}, {"config_hash": "abc"})
    for name, tensor in model.state_dict().items():
        assert torch.equal(ckpt.model_state()[name], tensor)
    saved = ckpt.optimizer_state()  # keyed by parameter name, as get_optimizer_state_dict gives it
    original = get_optimizer_state_dict(model, optimizer)
    assert saved is not None and saved["param_groups"] == original["param_groups"]
    assert saved["state"].keys() == original["state"].keys() == {"0.weight", "0.bias", "1.weight", "1.bias"}
    for name, state in original["state"].items():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(saved["state"][name][key], state[key]), (name, key)
    assert ckpt.rng_state(1) is not None
    with pytest.raises(CheckpointError, match="2 ranks, rank 2 asked"):
        ckpt.rng_state(2)


def test_tied_tensors_are_stored_once_and_tied_again(tmp_path: Path) -> None:
    weight = torch.arange(12.0).reshape(3, 4)
    state = {"embed.weight": weight, "head.weight": weight, "other": weight[1:]}
    path = CheckpointManager(tmp_path).save(1, model_state=state)
    loaded = CheckpointManager(tmp_path).load(path).model_state()
    assert loaded["head.weight"] is loaded["embed.weight"]
    assert torch.equal(loaded["other"], weight[1:])
    files = checked_files(read_manifest(path))
    stored = safe_reader(path / "tensors", files).read_metadata().state_dict_metadata
    assert sorted(stored) == ["model.embed.weight", "model.other"]


def test_rng_state_round_trip() -> None:
    state = capture_rng_state()
    json.dumps(state)  # JSON-ready
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    restore_rng_state(json.loads(json.dumps(state)))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_retention_keeps_the_last_k_and_same_step_is_replaced(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=2)
    for step in (1, 2, 3, 4):
        manager.save(step, model_state={"w": torch.full((2,), float(step))})
    assert [p.name for p in manager.complete()] == ["step_000003", "step_000004"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_000003", "step_000004"]
    manager.save(4, model_state={"w": torch.full((2,), 40.0)})
    assert manager.load(manager.path_for(4)).model_state()["w"].tolist() == [40.0, 40.0]


def test_incomplete_and_damaged_checkpoints_are_ignored_and_named(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(1, model_state={"w": torch.zeros(2)})
    good = manager.save(2, model_state={"w": torch.ones(2)})
    (tmp_path / "step_000003").mkdir()  # a directory without state.json
    (tmp_path / "step_000003" / "rng.json").write_bytes(b"x")
    assert manager.latest() == good
    with pytest.raises(CheckpointError, match="step_000003 is incomplete: it has no state.json"):
        manager.resolve_resume(str(tmp_path / "step_000003"))
    with open(good / "tensors" / "__0_0.distcp", "ab") as f:  # damaged after the fact
        f.write(b"junk")
    assert manager.latest() == manager.path_for(1)
    with pytest.raises(CheckpointError, match=r"step_000002 is damaged: tensors/__0_0.distcp has \d+ bytes"):
        manager.load(good)
    assert manager.resolve_resume(None) is None and manager.resolve_resume("none") is None
    assert CheckpointManager(tmp_path / "nothing").resolve_resume("auto") is None


class _NotATensor:
    pass


def test_optimizer_state_is_loaded_with_weights_only(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    path = manager.save(1, model_state={"w": torch.zeros(1)}, optimizer_state={"state": {0: _NotATensor()}})
    with pytest.raises(CheckpointError, match="refused to load: it holds objects other than tensors"):
        manager.load(path).optimizer_state()
    with pytest.raises(ValueError, match="JSON-serialisable"):
        manager.save(2, model_state={"w": torch.zeros(1)}, data_state={"sampler": _NotATensor()})


_WRITER = textwrap.dedent(
    """
    import sys, time
    import torch
    import videorl.runs.checkpoint as ck

    root, mode = sys.argv[1], sys.argv[2]
    manager = ck.CheckpointManager(root)
    state = {"w": torch.arange(1000.0)}
    manager.save(1, model_state=state, optimizer_state={"state": {}, "param_groups": []},
                 data_state={"index": 1})

    def hang(message):
        print(message, flush=True)
        time.sleep(120)

    if mode == "mid-write":  # stop while optimizer.pt is half written
        def partial_save(obj, f, *args, **kwargs):
            f.write(b"half an optimizer")
            f.flush()
            hang("WRITING")
        torch.save = partial_save
    else:  # stop after the rename, before `latest` is updated
        ck.CheckpointManager._write_pointer = lambda self, name: hang("RENAMED")
    manager.save(2, model_state={"w": torch.arange(1000.0) * 2},
                 optimizer_state={"state": {}, "param_groups": []}, data_state={"index": 2})
    """
)


def _kill_writer_at(root: Path, mode: str, marker: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(root), mode], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == marker, f"writer said {line!r}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_writer_killed_mid_write_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    _kill_writer_at(tmp_path, "mid-write", "WRITING")
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-step_000002")]
    assert len(leftovers) == 1  # the half-written directory is there...
    manager = CheckpointManager(tmp_path)
    latest = manager.resolve_resume("auto")
    assert latest is not None and latest.name == "step_000001"  # ...and ignored
    ckpt = manager.load(latest)
    assert ckpt.data_state == {"index": 1} and torch.equal(ckpt.model_state()["w"], torch.arange(1000.0))
    manager.save(2, model_state={"w": torch.zeros(1)})  # the next save removes the leftovers
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.slow
def test_writer_killed_before_the_pointer_update_keeps_the_new_checkpoint(tmp_path: Path) -> None:
    _kill_writer_at(tmp_path, "before-pointer", "RENAMED")
    assert (tmp_path / "latest").read_text() == "step_000001\n"  # the pointer lags...
    manager = CheckpointManager(tmp_path)
    ckpt = manager.load(manager.resolve_resume("auto"))  # type: ignore[arg-type]
    assert ckpt.step == 2 and ckpt.data_state == {"index": 2}  # ...resume scans, so step 2 is not lost
    assert torch.equal(ckpt.model_state()["w"], torch.arange(1000.0) * 2)


def test_export_hf_model_loads_with_transformers(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    base_model = transformers.Qwen2ForCausalLM(config)
    base = tmp_path / "base"
    base_model.save_pretrained(base)
    (base / "tokenizer_config.json").write_text('{"model_max_length": 64}')
    (base / "chat_template.jinja").write_text("{{ messages }}")
    (base / "pytorch_model.bin.index.json").write_text("{}")  # a weight index of the base: not copied

    with torch.no_grad():  # "training" changed the weights
        for p in base_model.parameters():
            p.add_(0.5)
    manager = CheckpointManager(tmp_path / "run" / "checkpoints")
    path = manager.save(5, model_state=base_model.state_dict())
    out = export_hf_model(path, base, tmp_path / "run" / "hf")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            ".videorl-export.json",
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "tokenizer_config.json",
            "chat_template.jinja",
        ]
    )
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    for name, tensor in base_model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    with pytest.raises(CheckpointError, match="already exists"):
        export_hf_model(path, base, out)
    with pytest.raises(CheckpointError, match="no config.json"):
        export_hf_model(path, tmp_path, tmp_path / "other")


def test_resuming_with_another_number_of_ranks_says_how_many_wrote_it(tmp_path: Path) -> None:
    from videorl.runs.checkpoint import Checkpoint

    ckpt = Checkpoint(
        tmp_path / "step_000004",
        4,
        data_state={"ranks": [{"epoch": 0, "index": 2}, {"epoch": 0, "index": 2}]},
    )
    assert ckpt.rank_data_states(2, "the same number of processes")[1] == {"epoch": 0, "index": 2}
    with pytest.raises(ConfigError) as err:
        ckpt.rank_data_states(4, "ray.actor_workers={n}")
    assert (
        str(err.value)
        == f"{tmp_path / 'step_000004'} was written by 2 rank(s); resume it with ray.actor_workers=2 (now 4)"
    )


def _flip_byte(path: Path, offset: int) -> None:
    """Corrupt ``path`` in place without changing its size."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


SHARD = "tensors/__0_0.distcp"


@pytest.mark.parametrize("where", ["tensors/.metadata", SHARD])
def test_a_same_size_corrupt_latest_checkpoint_falls_back_with_a_warning(
    tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(1, model_state={"w": torch.zeros(64)}, optimizer_state={"state": {}, "param_groups": []})
    bad = manager.save(
        2, model_state={"w": torch.ones(64)}, optimizer_state={"state": {}, "param_groups": []}
    )
    _flip_byte(bad / where, (bad / where).stat().st_size - 3)
    fresh = CheckpointManager(tmp_path)
    assert fresh.latest() == bad  # sizes alone look fine
    with caplog.at_level("WARNING", logger="videorl.checkpoint"):
        assert fresh.resolve_resume("auto") == manager.path_for(1)
    assert "step_000002" in caplog.text and "corrupt" in caplog.text and "falling back" in caplog.text
    with pytest.raises(CheckpointError, match=f"step_000002 is corrupt: {where} does not match its checksum"):
        fresh.load(bad)


def _format1_checkpoint(root: Path, step: int, state: dict[str, torch.Tensor], *, checksums: bool) -> Path:
    """A checkpoint as videorl wrote it before sharding: one model.safetensors, the manifest format 1."""
    from safetensors.torch import save_file

    path = root / f"step_{step:06d}"
    path.mkdir(parents=True)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    size = (path / "model.safetensors").stat().st_size
    manifest: dict[str, object] = {
        "format": 1,
        "step": step,
        "files": {"model.safetensors": size},
        "data": {},
    }
    if checksums:
        manifest["checksums"] = {"model.safetensors": file_crc32(path / "model.safetensors")}
    (path / "state.json").write_text(json.dumps(manifest))
    return path


def test_a_format_1_checkpoint_exports_but_does_not_resume(tmp_path: Path) -> None:
    """A checkpoint of an earlier videorl: its model still reads (export), a resume says what to do."""
    model, optimizer = _model_and_optimizer()
    path = _format1_checkpoint(tmp_path, 3, dict(model.state_dict()), checksums=True)
    ckpt = CheckpointManager(tmp_path).load(path)
    assert all(torch.equal(ckpt.model_state()[k], v) for k, v in model.state_dict().items())
    with pytest.raises(CheckpointError) as info:
        resume("auto", ActorState(model, optimizer), CheckpointManager(tmp_path), Parallel())
    assert str(info.value).startswith(f"{path} was written by an earlier videorl (format 1")
    assert f"videorl export {path} OUT" in str(info.value)


def test_a_corrupt_checkpoint_without_checksums_is_caught_by_its_header(tmp_path: Path) -> None:
    """Format-1 checkpoints written before checksums were recorded: a damaged header is still no raw
    SafetensorError."""
    first = _format1_checkpoint(tmp_path, 1, {"w": torch.zeros(8)}, checksums=False)
    bad = _format1_checkpoint(tmp_path, 2, {"w": torch.ones(8)}, checksums=False)
    _flip_byte(bad / "model.safetensors", 0)  # the header length
    assert CheckpointManager(tmp_path).resolve_resume("auto") == first
    with pytest.raises(
        CheckpointError, match="is corrupt: model.safetensors is not a readable safetensors file"
    ):
        CheckpointManager(tmp_path).load(bad)


def test_a_truncated_checkpoint_is_skipped_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(1, model_state={"w": torch.zeros(8)})
    bad = manager.save(2, model_state={"w": torch.ones(8)})
    shard = bad / SHARD
    shard.write_bytes(shard.read_bytes()[:-10])
    with caplog.at_level("WARNING", logger="videorl.checkpoint"):
        assert CheckpointManager(tmp_path).resolve_resume("auto") == manager.path_for(1)
    assert "skipping checkpoint step_000002" in caplog.text and f"{SHARD} has" in caplog.text


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_corrupt_optimizer_state_says_it_is_corrupt(tmp_path: Path, damage: str) -> None:
    model, optimizer = _model_and_optimizer()
    path = CheckpointManager(tmp_path).save(
        1, model_state=model.state_dict(), optimizer_state=optimizer.state_dict()
    )
    target = path / SHARD
    size = target.stat().st_size
    if damage == "truncated":  # a same-size file whose second half is zeros
        target.write_bytes(target.read_bytes()[: size // 2] + bytes(size - size // 2))
    else:
        target.write_bytes(bytes(range(256)) * (size // 256) + bytes(size % 256))
    with pytest.raises(CheckpointError, match=f"{SHARD} does not match its checksum"):
        CheckpointManager(tmp_path).load(path)  # the load checks the checksum...
    with pytest.raises(CheckpointError, match="tensors is corrupt") as info:
        Checkpoint(path, 1).optimizer_state()  # ...and reading it unchecked says "corrupt" too
    assert "weights_only" not in str(info.value)


def test_a_tampered_optimizer_state_never_advises_weights_only_false(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    path = manager.save(1, model_state={"w": torch.zeros(1)}, optimizer_state={"state": {0: _NotATensor()}})
    with pytest.raises(CheckpointError, match="refused to load") as info:
        manager.load(path).optimizer_state()
    assert "weights_only" not in str(info.value) and "_NotATensor" in str(info.value)


class _Payload:
    """Pickles as a call of ``os.system``: what a tampered ``.metadata`` could run when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_tampered_dcp_metadata_is_refused_before_it_runs(tmp_path: Path) -> None:
    import pickle

    manager = CheckpointManager(tmp_path / "checkpoints")
    path = manager.save(1, model_state={"w": torch.ones(4)})
    marker = tmp_path / "ran"
    metadata = path / "tensors" / ".metadata"
    metadata.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(CheckpointError, match="does not match its checksum|is damaged"):
        CheckpointManager(tmp_path / "checkpoints").load(path)  # the manifest catches it first...
    state = json.loads((path / "state.json").read_text())  # ...and a tamperer who fixes the manifest
    state["files"]["tensors/.metadata"] = metadata.stat().st_size
    state["checksums"]["tensors/.metadata"] = file_crc32(metadata)
    (path / "state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match=r"refused to load.*it names posix.system"):
        CheckpointManager(tmp_path / "checkpoints").load(path).model_state()
    assert not marker.exists()


def test_one_process_resume_is_bit_identical_and_ties_stay_tied(tmp_path: Path) -> None:
    """save_checkpoint / resume with ActorState in one process (no process group): the step after a
    resume equals the step after the save, tied weights stay one parameter."""

    def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(6, 4), torch.nn.Linear(4, 6, bias=False))
        model[1].weight = model[0].weight
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)

    def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        model(torch.tensor([1, 2, 3])).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    model, optimizer = build()
    train_step(model, optimizer)
    manager = CheckpointManager(tmp_path)
    save_checkpoint(1, ActorState(model, optimizer), manager, Parallel(), data_state={"epoch": 0, "index": 3})
    draws = [random.random(), np.random.rand(), torch.rand(1).item()]  # repeated after the resume
    train_step(model, optimizer)
    manager.wait()

    class Position:
        def __init__(self) -> None:
            self.state: dict[str, int] = {}

        def state_dict(self) -> dict[str, int]:
            return self.state

        def load_state_dict(self, state: dict[str, int]) -> None:
            self.state = state

    fresh, fresh_optimizer = build()
    position = Position()
    step = resume(
        "auto", ActorState(fresh, fresh_optimizer), CheckpointManager(tmp_path), Parallel(), data=position
    )
    assert step == 1 and position.state == {"epoch": 0, "index": 3}
    assert [random.random(), np.random.rand(), torch.rand(1).item()] == draws  # the RNG as at the save
    assert fresh[1].weight is fresh[0].weight
    train_step(fresh, fresh_optimizer)
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), name
    assert fresh_optimizer.state_dict()["state"][0]["step"] == 2


class _Tensors:
    """A Stateful of plain tensors: the state a resuming run loads into."""

    def __init__(self, **tensors: torch.Tensor) -> None:
        self.tensors = tensors

    def state_dict(self) -> dict[str, Any]:
        return {"model": dict(self.tensors)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tensors = dict(state["model"])


def test_resuming_other_keys_or_shapes_names_them_and_the_lora_settings(tmp_path: Path) -> None:
    """A LoRA run resuming a full checkpoint (keys missing), the reverse (keys not in the run) or
    another rank (other shapes) is a config mismatch, never reported as a corrupt checkpoint."""
    run = tmp_path / "run"
    manager = CheckpointManager(run / "checkpoints")
    saved = {"base.weight": torch.ones(4, 4), "lora_A": torch.ones(8, 4), "lora_B": torch.ones(4, 8)}
    manager.save(1, model_state=saved)
    path = manager.path_for(1)
    ckpt = manager.load(path)
    same = _Tensors(**{k: torch.zeros_like(v) for k, v in saved.items()})
    ckpt.load_into(same, Parallel())
    assert torch.equal(same.tensors["lora_A"], torch.ones(8, 4))

    extra = {f"layer{i}.lora": torch.zeros(2) for i in range(5)}
    with pytest.raises(CheckpointError) as missing:
        ckpt.load_into(_Tensors(**{k: torch.zeros_like(v) for k, v in saved.items()}, **extra), Parallel())
    text = str(missing.value)
    assert (
        "5 key(s) of this run are not in it (model.layer0.lora, model.layer1.lora, model.layer2.lora, and 2 "
        "more)" in text
    )
    assert "actor.lora" in text and str(run / "config.yaml") in text and "corrupt" not in text
    with pytest.raises(
        CheckpointError, match=r"2 key\(s\) of it are not in this run \(model.lora_A, model.lora_B\)"
    ):
        ckpt.load_into(_Tensors(**{"base.weight": torch.zeros(4, 4)}), Parallel())
    rank_4 = _Tensors(
        **{"base.weight": torch.zeros(4, 4), "lora_A": torch.zeros(4, 4), "lora_B": torch.zeros(4, 4)}
    )
    with pytest.raises(CheckpointError) as reshaped:
        ckpt.load_into(rank_4, Parallel())
    assert "2 tensor(s) have another shape (model.lora_A: [8, 4] in the checkpoint, [4, 4] now, " in str(
        reshaped.value
    )
    assert torch.equal(rank_4.tensors["lora_A"], torch.zeros(4, 4))  # nothing was loaded


def test_a_rank_that_cannot_checksum_its_files_tells_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 of 2 fails to fsync its shard: it still takes part in the gather (with its error), and
    every rank raises naming rank 1 and the file, rather than rank 0 waiting in the gather for hours."""
    manager = CheckpointManager(tmp_path)
    tmp = tmp_path / ".tmp-step_000001"
    (tmp / "tensors").mkdir(parents=True)
    for name in (".metadata", "__0_0.distcp", "__1_0.distcp"):
        (tmp / "tensors" / name).write_bytes(b"x")
    shard = tmp / "tensors" / "__1_0.distcp"

    def fsync(path: Path) -> None:
        if Path(path) == shard:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(ck, "fsync_file", fsync)
    sent: list[Any] = []

    def gather(value: Any, world_size: int, group: Any) -> list[Any]:
        sent.append(value)
        return [({"tensors/__0_0.distcp": [1, "crc32:0"]}, None), value]  # rank 0's files, then rank 1's

    monkeypatch.setattr(ck, "_gather", gather)
    with pytest.raises(CheckpointError) as raised:
        manager._finish(1, tmp, Parallel(rank=1, world_size=2), object(), {}, None, [])
    assert sent == [({}, f"OSError: [Errno 5] {shard}: Input/output error")]
    assert str(raised.value) == (
        f"the checkpoint of step 1 was not completed: rank 1 could not flush and checksum its files: "
        f"OSError: [Errno 5] {shard}: Input/output error"
    )
    # rank 0's view: rank 1's record says it failed; nothing is committed and the directory is removed
    monkeypatch.setattr(ck, "_gather", lambda value, world_size, group: [value, sent[0]])
    with pytest.raises(
        CheckpointError, match=r"rank 1 could not flush and checksum its files: OSError.*__1_0"
    ):
        manager._finish(1, tmp, Parallel(rank=0, world_size=2), object(), {}, None, [])
    assert not tmp.exists() and manager.latest() is None


def test_an_asynchronous_save_is_complete_only_once_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from torch.distributed.checkpoint import FileSystemWriter

    release = threading.Event()
    write = FileSystemWriter.write_data

    def held(self: FileSystemWriter, *args: object, **kwargs: object) -> object:
        assert release.wait(30)
        return write(self, *args, **kwargs)

    monkeypatch.setattr(FileSystemWriter, "write_data", held)
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path)
    release.set()
    first = manager.save(1, model_state={"w": torch.zeros(2)})
    release.clear()
    save_checkpoint(2, ActorState(model, optimizer), manager, Parallel(), data_state={"index": 2})
    assert manager.latest() == first and (tmp_path / "latest").read_text() == "step_000001\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == [".tmp-step_000002"]
    release.set()
    manager.wait()
    assert manager.latest() == manager.path_for(2) and (tmp_path / "latest").read_text() == "step_000002\n"
    assert CheckpointManager(tmp_path).load(manager.path_for(2)).data_state == {
        "ranks": [{"index": 2}],
        "sequence_parallel_size": 1,
    }


def test_an_asynchronous_save_that_fails_raises_at_the_next_save_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from torch.distributed.checkpoint import FileSystemWriter

    def full(self: FileSystemWriter, *args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, "No space left on device")

    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path)
    save_checkpoint(1, ActorState(model, optimizer), manager, Parallel(), data_state={}, wait=True)
    monkeypatch.setattr(FileSystemWriter, "write_data", full)
    save_checkpoint(2, ActorState(model, optimizer), manager, Parallel(), data_state={})
    with pytest.raises(DiskFullError, match="step 2 was not written.*step_000001, is kept"):
        save_checkpoint(3, ActorState(model, optimizer), manager, Parallel(), data_state={})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step_000001"]


def _tiny_base(tmp_path: Path) -> Path:
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    (base / "tokenizer_config.json").write_text("{}")
    return base


def test_export_refuses_the_run_its_checkpoints_and_the_base_model(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 1\n")
    (run / "metrics.jsonl").write_text("{}\n")
    path = CheckpointManager(run / "checkpoints").save(1, model_state={"w": torch.ones(2)})
    base = _tiny_base(tmp_path)
    for out, relation in [
        (run, "is the run"),
        (run / "checkpoints", "lies inside the run"),
        (run / "exported", "lies inside the run"),
        (path, "lies inside the run"),
        (tmp_path, "holds the run"),
        (base, "is the base model"),
    ]:
        with pytest.raises(CheckpointError, match=relation):
            export_hf_model(path, base, out, overwrite=True)
    link = tmp_path / "link"
    link.symlink_to(run)
    with pytest.raises(CheckpointError, match="is the run"):
        export_hf_model(path, base, link, overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml", "metrics.jsonl"]
    assert CheckpointManager(run / "checkpoints").latest() == path


def test_export_overwrite_replaces_only_an_earlier_export(tmp_path: Path) -> None:
    path = CheckpointManager(tmp_path / "run" / "checkpoints").save(1, model_state={"w": torch.ones(2)})
    base = _tiny_base(tmp_path)
    unrelated = tmp_path / "thesis"
    unrelated.mkdir()
    (unrelated / "chapter1.tex").write_text("years of work")
    with pytest.raises(CheckpointError, match="was not written by videorl export"):
        export_hf_model(path, base, unrelated, overwrite=True)
    assert (unrelated / "chapter1.tex").read_text() == "years of work"
    out = export_hf_model(path, base, tmp_path / "hf")
    assert json.loads((out / ".videorl-export.json").read_text())["source"] == str(path)
    (out / "stale.txt").write_text("from the first export")
    export_hf_model(path, base, out, overwrite=True)  # an earlier export: replaced
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").is_file()
    (tmp_path / "empty").mkdir()
    assert export_hf_model(path, base, tmp_path / "empty", overwrite=True) == tmp_path / "empty"
