"""The order demo's data: balanced answers, and a control that really reverses the order the model sees."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from videorl import demo


def square_colour(frame: np.ndarray) -> str:
    """The name of the colour nearest to the mean of the bright pixels (the background is below 40)."""
    pixels = frame.reshape(3, -1).T.astype(np.float64)
    mean = pixels[pixels.max(axis=1) > 100].mean(axis=0)
    return min(demo.COLOURS, key=lambda name: float(np.abs(mean - np.array(demo.COLOURS[name])).sum()))


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_every_ordered_pair_of_colours_appears_and_the_first_colours_are_balanced() -> None:
    task = demo.TASKS["order"]
    schedules = [task.schedule(i) for i in range(12)]
    names = list(demo.COLOURS)
    assert {(s[0], s[-1]) for s in schedules} == {(a, b) for a in names for b in names if a != b}
    assert all(
        s == (s[0], s[0], s[-1], s[-1]) for s in schedules
    )  # one change, between the two temporal patches
    assert Counter(s[0] for s in schedules) == {name: 3 for name in names}  # chance is 0.25
    assert all(demo.TASKS["colour"].schedule(i) == (names[i % 4],) * 4 for i in range(8))


def test_the_reversed_control_shows_the_same_clips_with_the_other_colour_first(tmp_path: Path) -> None:
    from videorl.media import DecodeParams, MediaCache, build_cache

    val = demo.write_task(tmp_path, 8, seed=0, split="val", task="order")
    control = demo.write_task(tmp_path, 8, seed=0, split="val", task="order", reverse=True)
    assert control.name == "val-reversed.jsonl"
    side = demo.SIDE * demo.SIDE
    params = DecodeParams(
        factor=28, temporal_patch_size=2, fps=demo.FPS, max_frames=4, min_pixels=side, max_pixels=side
    )
    report = build_cache(
        sorted((tmp_path / "clips").glob("*.mp4")), params, tmp_path / "cache", workers=1, progress=False
    )
    assert not report.failures
    cache = MediaCache(tmp_path / "cache", "preprocessed_only")  # the frames training reads
    letters: Counter[str] = Counter()
    for held_out, reversed_row in zip(rows(val), rows(control), strict=True):
        answer = list(demo.COLOURS)["ABCD".index(held_out["answer"])]
        assert reversed_row["answer"] == held_out["answer"] and reversed_row["problem"] == held_out["problem"]
        frames, meta = cache.load_numpy(tmp_path / held_out["videos"][0], params)
        flipped, _ = cache.load_numpy(tmp_path / reversed_row["videos"][0], params)
        assert frames.shape == flipped.shape == (4, 3, demo.SIDE, demo.SIDE) and meta.frame_indices == (
            0,
            1,
            2,
            3,
        )
        seen = [square_colour(f) for f in frames]
        assert seen[:2] == [answer, answer] and seen[2] == seen[3] != answer
        assert [square_colour(f) for f in flipped] == seen[
            ::-1
        ]  # the control's first colour is the wrong answer
        # the same clip, not a new one: each frame matches its mirror up to the codec's noise
        assert np.abs(flipped.astype(int) - frames[::-1].astype(int)).mean() < 3
        letters[held_out["answer"]] += 1
    assert letters == {"A": 2, "B": 2, "C": 2, "D": 2}
