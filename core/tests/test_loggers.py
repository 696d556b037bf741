"""Experiment loggers behind ``register_loggers``: JSONL, TensorBoard, W&B (offline, its run file read
back) and MLflow (a local SQLite store read back with ``MlflowClient``); a failing tracker is reported
and left out."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

from videorl.config import TrainConfig, load_config
from videorl.errors import ConfigError, UnknownComponentError
from videorl.hookspecs import hookimpl
from videorl.plugins import load_plugins
from videorl.runs import trackers
from videorl.runs.history import read_metrics
from videorl.runs.records import MetricsWriter, write_run_metadata
from videorl.runs.trackers import TRACKER_IDS_FILE


def _config(tmp_path: Path, *overrides: str) -> Any:
    return load_config(None, ["model.path=/m", "data.train_files=[a.jsonl]", f"output_dir={tmp_path / 'run'}",
                              *overrides])  # fmt: skip


def _writer(tmp_path: Path, plugins: Any, *overrides: str, start: int = 0) -> MetricsWriter:
    config = _config(tmp_path, *overrides)
    write_run_metadata(tmp_path / "run", config, plugins, argv=["videorl", "train"])
    return MetricsWriter.for_run(tmp_path / "run", config, plugins, start_step=start)


@pytest.fixture(scope="module")
def plugins() -> Any:
    return load_plugins(entry_points=False)


def test_the_first_party_loggers_are_registered(plugins: Any) -> None:
    assert plugins.loggers.names() == ["jsonl", "mlflow", "tensorboard", "wandb"]


def test_config_checks_the_logger_list(tmp_path: Path) -> None:
    assert _config(tmp_path).trainer.loggers == ["jsonl", "tensorboard"]
    with pytest.raises(ConfigError, match=r"trainer.loggers must include jsonl"):
        _config(tmp_path, "trainer.loggers=[tensorboard]")
    with pytest.raises(
        ConfigError, match=r"trainer.logger_options options for loggers not in trainer.loggers: wandb"
    ):
        _config(tmp_path, "trainer.logger_options={wandb: {mode: offline}}")


def test_an_unknown_logger_lists_the_registered_ones(tmp_path: Path, plugins: Any) -> None:
    with pytest.raises(UnknownComponentError, match=r"unknown logger 'wandbb'\. Did you mean 'wandb'\?"):
        _writer(tmp_path, plugins, "trainer.loggers=[jsonl, wandbb]")


def test_a_missing_tracker_library_says_which_extra_to_install(
    tmp_path: Path, plugins: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ConfigError, match=r"the wandb logger needs wandb: pip install 'videorl\[wandb\]'"):
        _writer(tmp_path, plugins, "trainer.loggers=[jsonl, wandb]")


def test_tracker_libraries_are_imported_only_when_enabled(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from videorl.config import load_config\n"
        "from videorl.plugins import load_plugins\n"
        "from videorl.runs.records import MetricsWriter\n"
        "config = load_config(None, ['model.path=/m', 'data.train_files=[a.jsonl]', "
        "'trainer.loggers=[jsonl]'])\n"
        f"with MetricsWriter.for_run({str(tmp_path)!r}, config, load_plugins()) as w:\n"
        "    w.log(1, {'x': 1.0})\n"
        "print(sorted(m for m in ('wandb', 'mlflow', 'tensorboard', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- W&B, offline ---------------------------------------------------------------------------------


def wandb_records(path: Path) -> list[Any]:
    """The protobuf records of a ``run-<id>.wandb`` file (LevelDB-log framing: 32 KiB blocks of
    ``crc32 | length | type`` chunks after a 7-byte ``:W&B`` header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, records, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if pos + 7 + length > len(data):  # a chunk the writer has not finished yet
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk  # full/first start a record
        if kind in (1, 4):  # full/last end it
            record = pb.Record()  # type: ignore[attr-defined]
            record.ParseFromString(pending)
            records.append(record)
    return records


def finished_wandb_records(path: Path) -> list[Any]:
    """The records of a W&B run file once its ``exit`` record is there (W&B's service process writes
    the file on its own time, after ``finish()`` returns)."""
    from google.protobuf.message import DecodeError

    deadline = time.monotonic() + 60
    while True:
        try:
            records = wandb_records(path) if path.stat().st_size > 7 else []
        except DecodeError:  # read mid-write: the service flushes a record's chunks one at a time
            if time.monotonic() > deadline:
                raise
            records = []
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _items(items: Any) -> dict[str, Any]:
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


@pytest.mark.slow
def test_wandb_offline_gets_config_metadata_metrics_and_resumes_the_same_run(
    tmp_path: Path, plugins: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    options = [
        "trainer.loggers=[jsonl, wandb]",
        "trainer.logger_options={wandb: {project: vr, mode: offline}}",
    ]
    with _writer(tmp_path, plugins, *options) as writer:
        for step in (1, 2, 3):
            writer.log(step, {"reward/overall": step / 10, "note": "text stays in metrics.jsonl"})
    run_id = json.loads((tmp_path / "run" / TRACKER_IDS_FILE).read_text())["train/wandb"]
    (run_file,) = (tmp_path / "run" / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
    records = finished_wandb_records(run_file)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.run_id == run_id and run.project == "vr" and run.display_name == "run"
    config = _items(run.config.update)
    assert config["config"]["model"]["path"] == "/m" and config["config"]["trainer"]["loggers"] == [
        "jsonl",
        "wandb",
    ]
    assert config["run"]["argv"] == ["videorl", "train"] and "git" in config["run"]
    assert config["run"]["requirements"] == plugins.requirements() and config["run"]["requirements"][
        0
    ].startswith("videorl==")
    history = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    assert [(h["_step"], h["reward/overall"]) for h in history] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert all("note" not in h for h in history)

    with _writer(tmp_path, plugins, *options, start=3) as writer:  # resumed: the same W&B run
        writer.log(4, {"reward/overall": 0.4})
    # the same id, so the same W&B run (a run started in the same second reuses its folder)
    latest = max(
        (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"), key=lambda p: p.stat().st_mtime_ns
    )
    assert latest.name == f"run-{run_id}.wandb"
    records = finished_wandb_records(latest)
    history = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    assert [(h["_step"], h["reward/overall"]) for h in history][-1] == (4, 0.4)


# --- MLflow, a local SQLite store -----------------------------------------------------------------


@pytest.mark.slow
def test_mlflow_gets_params_tags_artifacts_metrics_and_resumes_the_same_run(
    tmp_path: Path, plugins: Any
) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = [
        "trainer.loggers=[jsonl, mlflow]",
        f"trainer.logger_options={{mlflow: {{tracking_uri: '{uri}', experiment: exp, "
        f"artifact_location: '{tmp_path / 'artifacts'}'}}}}",
    ]
    with _writer(tmp_path, plugins, *options) as writer:
        for step in (1, 2):
            writer.log(step, {"reward/overall": step / 10, "actor": {"kl": float("nan")}})
    first = json.loads((tmp_path / "run" / "run.json").read_text())  # the revision the MLflow run began at
    with _writer(tmp_path, plugins, *options, start=2) as writer:
        writer.log(3, {"reward/overall": 0.3})

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("exp")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert json.loads((tmp_path / "run" / TRACKER_IDS_FILE).read_text())["train/mlflow"] == run.info.run_id
    history = client.get_metric_history(run.info.run_id, "reward/overall")
    assert [(m.step, m.value) for m in history] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert "actor/kl" not in run.data.metrics  # NaN is null in metrics.jsonl, nothing in MLflow
    assert (
        run.data.params["model.path"] == "/m" and run.data.params["trainer.loggers"] == "['jsonl', 'mlflow']"
    )
    assert run.data.tags["mlflow.source.git.commit"] == str((first["git"] or {}).get("revision", ""))
    assert run.data.tags["plugin.videorl"] == plugins.requirements()[0].split("==")[1]
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    assert json.loads((artifacts / "config.json").read_text())["model"]["path"] == "/m"
    assert json.loads((artifacts / "run.json").read_text())["argv"] == ["videorl", "train"]


# --- a third party's logger, and one that fails -------------------------------------------------


class Recorder:
    """A third party's logger; ``fail_at``: the step whose log raises (a tracker going down)."""

    seen: ClassVar[list[tuple[str, Any]]] = []

    def __init__(self, run: Any, *, fail_at: int = 0) -> None:
        self.fail_at = fail_at
        Recorder.seen.append(("open", (run.kind, run.start_step, run.config["seed"])))

    def log(self, step: int, row: Any) -> None:
        if step == self.fail_at:
            raise ConnectionError("tracker unreachable")
        Recorder.seen.append(("log", (step, row["reward/overall"])))

    def log_summary(self, summary: Any) -> None:
        Recorder.seen.append(("summary", dict(summary)))

    def close(self) -> None:
        Recorder.seen.append(("close", None))


def recorder_plugin() -> ModuleType:
    """A one-off plugin module registering :class:`Recorder` (as ``--plugin`` would load one)."""
    module = ModuleType("videorl_recorder")

    @hookimpl
    def register_loggers(register: Any) -> None:
        register("recorder", Recorder)

    module.register_loggers = register_loggers  # type: ignore[attr-defined]
    return module


def test_a_failing_tracker_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    plugins = load_plugins(entry_points=False, extra=[recorder_plugin()])
    Recorder.seen = []
    options = [
        "trainer.loggers=[jsonl, recorder]",
        "trainer.logger_options={recorder: {fail_at: 2}}",
        "seed=7",
    ]
    # the tracker runs in its own thread: its failure at step 2 is reported at the next call or the close
    failed = (
        r"logger 'recorder' failed \(step 2\): ConnectionError: tracker unreachable; it is off for the rest"
    )
    with pytest.warns(RuntimeWarning, match=failed), _writer(tmp_path, plugins, *options) as writer:
        writer.log(1, {"reward/overall": 0.1})
        writer.log(2, {"reward/overall": 0.2})
        writer.log(3, {"reward/overall": 0.3})
    assert writer.loggers.failed == {"recorder": "ConnectionError: tracker unreachable"}
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1, 2, 3]
    assert Recorder.seen == [("open", ("train", 0, 7)), ("log", (1, 0.1)), ("close", None)]


@pytest.mark.slow
def test_the_documented_logger_config_loads_and_runs(
    tmp_path: Path, plugins: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("sqlalchemy")
    doc = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text(encoding="utf-8")
    snippet = doc.split("<!-- loggers-example (loaded by core/tests/test_loggers.py) -->\n```yaml\n", 1)[1]
    snippet = snippet.split("```", 1)[0]
    path = tmp_path / "train.yaml"
    path.write_text(f"model:\n  path: /m\ndata:\n  train_files: [a.jsonl]\noutput_dir: run\n{snippet}")
    config: TrainConfig = load_config(path)
    assert config.trainer.loggers == ["jsonl", "tensorboard", "wandb", "mlflow"]
    assert config.trainer.logger_options["wandb"] == {"project": "video-grpo", "mode": "offline"}
    monkeypatch.chdir(tmp_path)  # the snippet's sqlite:///mlflow.db is relative to the working directory
    monkeypatch.setenv("WANDB_SILENT", "true")
    write_run_metadata(tmp_path / "run", config, plugins)
    with MetricsWriter.for_run(tmp_path / "run", config, plugins) as writer:
        writer.log(1, {"reward/overall": 0.5})
        assert sorted(writer.loggers.loggers) == ["jsonl", "mlflow", "tensorboard", "wandb"]
    assert not writer.loggers.failed
    assert (tmp_path / "mlflow.db").is_file() and list((tmp_path / "run" / "tensorboard").iterdir())
    assert set(json.loads((tmp_path / "run" / TRACKER_IDS_FILE).read_text())) == {
        "train/wandb",
        "train/mlflow",
    }


def test_without_tensorboard_the_default_loggers_warn_and_go_on(
    tmp_path: Path, plugins: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # the library is not installed
    with pytest.warns(
        RuntimeWarning, match=r"TensorBoard logging is off: .*pip install tensorboard, or leave"
    ):
        writer = _writer(tmp_path, plugins)  # trainer.loggers' default: [jsonl, tensorboard]
    with writer:
        writer.log(1, {"x": 1.0})
        assert list(writer.loggers.loggers) == ["jsonl"]
    assert not (tmp_path / "run" / "tensorboard").exists()


class Hanging:
    """A tracker whose server stopped answering: ``log`` never returns."""

    released = threading.Event()

    def __init__(self, run: Any) -> None:
        self.rows: list[int] = []

    def log(self, step: int, row: Any) -> None:
        self.rows.append(step)
        Hanging.released.wait()  # forever, unless the test ends it

    def log_summary(self, summary: Any) -> None: ...

    def close(self) -> None: ...


def test_a_tracker_that_stops_answering_never_stalls_training(tmp_path: Path) -> None:
    module = ModuleType("videorl_hanging")

    @hookimpl
    def register_loggers(register: Any) -> None:
        register("hanging", Hanging)

    module.register_loggers = register_loggers  # type: ignore[attr-defined]
    plugins = load_plugins(entry_points=False, extra=[module])
    Hanging.released.clear()
    started = time.monotonic()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(trackers, "TRACKER_DEADLINE", 0.5)
            stuck = r"logger 'hanging' failed .*no answer within 0.5 s"
            with (
                pytest.warns(RuntimeWarning, match=stuck),
                _writer(tmp_path, plugins, "trainer.loggers=[jsonl, hanging]") as writer,
            ):
                for step in range(1, 4):
                    writer.log(step, {"reward/overall": 0.1})
                time.sleep(0.6)  # past the deadline of the call in progress
                writer.log(4, {"reward/overall": 0.1})
                assert "hanging" not in writer.loggers.loggers
                for step in range(5, 400):  # more rows than the queue holds: nothing waits
                    writer.log(step, {"reward/overall": 0.1})
        assert time.monotonic() - started < 5
        assert len(read_metrics(tmp_path / "run" / "metrics.jsonl")) == 399
    finally:
        Hanging.released.set()
