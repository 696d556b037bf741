"""A real training run logs to W&B (offline) and MLflow (SQLite) through ``trainer.loggers``, a plugin's
tracker that fails mid-run is reported and the run goes on, and a resumed run continues the same
tracker runs."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

from videorl import demo
from videorl.config import load_config
from videorl.hookspecs import hookimpl
from videorl.plugins import load_plugins
from videorl.runs.history import read_metrics
from videorl.train.compose import build_training


class Flaky:
    """A plugin's tracker whose server goes away at step 2."""

    steps: ClassVar[list[int]] = []

    def __init__(self, run: Any) -> None:
        pass

    def log(self, step: int, row: Any) -> None:
        if step == 2:
            raise ConnectionError("tracker server unreachable")
        Flaky.steps.append(step)

    def log_summary(self, summary: Any) -> None:
        pass

    def close(self) -> None:
        pass


def _flaky_plugin() -> ModuleType:
    module = ModuleType("videorl_flaky_tracker")

    @hookimpl
    def register_loggers(register: Any) -> None:
        register("flaky", Flaky)

    module.register_loggers = register_loggers  # type: ignore[attr-defined]
    return module


@pytest.mark.slow
def test_training_logs_to_wandb_and_mlflow_and_survives_a_failing_tracker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("sqlalchemy")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("WANDB_SILENT", "true")
    plugins = load_plugins(extra=[_flaky_plugin()])
    model, train, val = demo.prepare(tmp_path, plugins, family="qwen2_5_vl", seed=0, train=4, val=1)
    run = tmp_path / "run"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def overrides(steps: int, *extra: str) -> list[str]:
        return [*demo.demo_overrides(tmp_path, model, train, val, steps=steps, seed=3, engine="hf"),
                f"output_dir={run}", "data.rollout_batch_size=2", "actor.global_batch_size=2", "rollout.n=4",
                "trainer.progress_bar=false", "trainer.val_every=0", "trainer.save_every=1",
                "trainer.loggers=[jsonl, wandb, mlflow, flaky]",
                f"trainer.logger_options={{wandb: {{mode: offline, project: demo}}, mlflow: {{tracking_uri: "
                f"'{uri}', "
                f"artifact_location: '{tmp_path / 'artifacts'}'}}}}", *extra]  # fmt: skip

    Flaky.steps = []
    with pytest.warns(RuntimeWarning, match=r"logger 'flaky' failed \(step 2\): ConnectionError"):
        assert build_training(load_config(None, overrides(3)), plugins).run() == 3
    assert Flaky.steps == [1]  # off after its failure; the run went on
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]

    client = MlflowClient(tracking_uri=uri)
    (mlflow_run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    history = client.get_metric_history(mlflow_run.info.run_id, "reward/overall")
    assert [(m.step, m.value) for m in history] == [(r["step"], r["reward/overall"]) for r in rows]
    assert mlflow_run.data.params["model.path"] == str(model)
    requirements = (run / "requirements.txt").read_text().split()
    assert any(line.startswith("videorl-rewards==") for line in requirements)
    for line in requirements:
        name, _, version = line.partition("==")
        assert mlflow_run.data.tags[f"plugin.{name}"] == version
    ids = json.loads((run / "trackers.json").read_text())
    assert ids["train/mlflow"] == mlflow_run.info.run_id
    assert list((run / "wandb").glob(f"offline-run-*-{ids['train/wandb']}/run-{ids['train/wandb']}.wandb"))

    Flaky.steps = []
    assert build_training(load_config(None, overrides(4, "trainer.resume=auto")), plugins).run() == 4
    assert Flaky.steps == [4]
    assert json.loads((run / "trackers.json").read_text()) == ids  # the same tracker runs continue
    history = client.get_metric_history(mlflow_run.info.run_id, "reward/overall")
    assert [m.step for m in history] == [1, 2, 3, 4]
