"""Multi-image samples (several ``images`` in one row) through the data path of every Qwen family: a
Parquet row, the encoder, one placeholder run per image that matches its grid, and a training step.
(``videorl models check``'s ``two-images`` probe compares both engines against the trainer.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from videorl import demo
from videorl.alignment import check_alignment, visual_token_count
from videorl.config import TrainConfig, load_config
from videorl.data import load_samples
from videorl.plugins import load_plugins
from videorl.runs.history import read_metrics
from videorl.train.compose import build_training, make_backend, make_encoder

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")


def _images(out: Path) -> list[str]:
    """A red square on a wide picture and a blue one on a tall picture: two different grids."""
    from PIL import Image

    paths = []
    for name, size, colour in (("red.png", (84, 56), "red"), ("blue.png", (56, 84), "blue")):
        picture = Image.new("RGB", size, (10, 10, 10))
        picture.paste(demo.COLOURS[colour], (8, 8, 8 + demo.SQUARE, 8 + demo.SQUARE))
        picture.save(out / name)
        paths.append(name)
    return paths


def _dataset(out: Path, rows: int = 2) -> Path:
    images = _images(out)
    row = {"problem_type": "multiple choice",
           "problem": "<image><image>Which colour is in the first picture?",
           "options": demo.OPTIONS, "answer": "A", "offline_output": "<answer>A</answer>",
           "data_type": "image",
           "images": images}  # fmt: skip
    table = [{**row, "problem_id": f"two-images-{i}"} for i in range(rows)]
    path = out / "train.parquet"
    pq.write_table(pa.Table.from_pylist(table), path)
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_a_two_image_row_encodes_one_aligned_run_per_image(
    family: str, tiny_model_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    data = _dataset(tmp_path)
    config: TrainConfig = load_config(
        None, [f"model.path={tiny_model_dir(family)}", f"data.train_files=[{data}]"]
    )
    plugins = load_plugins()
    backend: Any = make_backend(config, plugins)
    sample = load_samples(data)[0]
    assert sample.images == [str(tmp_path / "red.png"), str(tmp_path / "blue.png")]
    encoded = make_encoder(config, backend, plugins)(sample).encoded
    assert encoded is not None
    grids = encoded.image_grid_thw
    assert len(grids) == 2 and grids[0][1:] == grids[1][1:][::-1] and grids[0][1] != grids[0][2]
    image_id = backend.token_ids["image"]
    check_alignment(sample.id, encoded.prompt_ids, token_id=image_id, grids=grids,
                    merge_size=backend.merge_size,
                    modality="image")  # fmt: skip
    # two separate placeholder runs, in the order of the images
    runs, previous = [], None
    for token in encoded.prompt_ids:
        if token == image_id and previous != image_id:
            runs.append(0)
        if token == image_id:
            runs[-1] += 1
        previous = token
    assert runs == [visual_token_count([g], backend.merge_size) for g in grids]


def test_training_steps_on_two_image_rows_from_parquet(tmp_path: Path) -> None:
    model, train, val = demo.prepare(tmp_path, load_plugins(), family="qwen2_5_vl", seed=0, train=2, val=1)
    data = _dataset(tmp_path, rows=2)
    overrides = [*demo.demo_overrides(tmp_path, model, train, val, steps=1, seed=3, engine="hf"),
                 f"output_dir={tmp_path / 'run'}", f"data.train_files=[{data}]", "data.val_files=[]",
                 "data.rollout_batch_size=2", "actor.global_batch_size=2", "rollout.n=2",
                 "trainer.progress_bar=false", "trainer.val_every=0", "trainer.loggers=[jsonl]"]  # fmt: skip
    assert build_training(load_config(None, overrides), load_plugins()).run() == 1
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert 0.0 <= row["reward/overall"] <= 1.0 and row["actor/grad_norm"] is not None
    assert json.loads((tmp_path / "run" / "run.json").read_text())["argv"]
