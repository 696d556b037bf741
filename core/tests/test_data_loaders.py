"""Dataset loading: both schemas into one Sample, plain video lists, and errors that name file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from videorl.data import Sample, load_samples
from videorl.errors import DataError

EVR1_ROW = {
    "problem_id": "evr1_000123",
    "problem": "<video>\nHow many times does the ball bounce before it stops?",
    "answer": "<answer>4</answer>",
    "videos": ["clevrer/video_10042.mp4"],
    "data_type": "video",
    "problem_type": "numerical",
    "options": [],
    "data_source": "CLEVRER",
    "preprocessed_video": "3f9c2a0d1b7e4c55.pt",
    "has_offline_trajectory": True,
    "offline_output": "<think>It bounces four times.</think><answer>4</answer>",
}
VR1_ROW = {
    "problem_id": 10452,
    "problem": "What does the man place on the table after opening the fridge?",
    "data_type": "video",
    "problem_type": "multiple choice",
    "options": ["A. A bottle", "B. A bowl", "C. A phone", "D. A towel"],
    "process": "<think>He takes out a glass bottle, so A.</think>",
    "solution": "<answer>A</answer>",
    "path": "./LLaVA-Video-178K/videos/xyz.mp4",
    "data_source": "LLaVA-Video-178K/30_60_s_youtube_v0_1",
}


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_easyvideor1_row(tmp_path: Path) -> None:
    (sample,) = load_samples(_jsonl(tmp_path / "train.jsonl", [EVR1_ROW]))
    assert sample == Sample(
        id="evr1_000123",
        data_type="video",
        problem=EVR1_ROW["problem"],  # type: ignore[arg-type]
        problem_type="numerical",
        ground_truth="<answer>4</answer>",
        options=[],
        videos=[str(tmp_path / "clevrer/video_10042.mp4")],
        offline_output="<think>It bounces four times.</think><answer>4</answer>",
        extra={"data_source": "CLEVRER", "preprocessed_video": "3f9c2a0d1b7e4c55.pt"},
        origin=f"{tmp_path / 'train.jsonl'}:1",
    )
    assert sample.has_offline_trajectory


def test_video_r1_row_in_a_json_array_with_a_media_root(tmp_path: Path) -> None:
    data = tmp_path / "Video-R1-260k.json"
    data.write_text(
        json.dumps(
            [VR1_ROW, {**VR1_ROW, "problem_id": 7, "data_type": "image", "path": "./img/a.png"}], indent=2
        )
    )
    video, image = load_samples(data, media_root=tmp_path / "Video-R1-data")
    assert (video.id, video.ground_truth, video.problem_type) == (
        "10452",
        "<answer>A</answer>",
        "multiple choice",
    )
    assert (
        video.videos == [str(tmp_path / "Video-R1-data/LLaVA-Video-178K/videos/xyz.mp4")] and not video.images
    )
    assert video.options == VR1_ROW["options"] and video.extra["process"].startswith("<think>")
    assert video.offline_output is None and not video.has_offline_trajectory
    assert image.data_type == "image" and image.images == [str(tmp_path / "Video-R1-data/img/a.png")]
    # indent=2: "[" on line 1, the first object on lines 2-17 (its options take 6), the second from 18
    assert (video.origin, image.origin) == (f"{data}:2", f"{data}:18")


def test_text_rows_and_inferred_data_types(tmp_path: Path) -> None:
    rows = [
        {"problem": "2+2?", "answer": "4"},
        {"prompt": "Describe.", "answer": "x", "images": ["/abs/p.jpg"]},
        {"question": "Q", "solution": "y", "video": "v.mp4"},
    ]
    text, image, video = load_samples(_jsonl(tmp_path / "d.jsonl", rows))
    assert (text.data_type, text.id, text.media) == ("text", "d:1", [])
    assert (image.data_type, image.images) == ("image", ["/abs/p.jpg"])
    assert (video.data_type, video.videos) == ("video", [str(tmp_path / "v.mp4")])


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"answer": "A", "videos": ["v.mp4"]}, "missing the question"),
        ({"problem": "Q", "videos": ["v.mp4"]}, "missing the ground truth"),
        ({"problem": 3, "answer": "A"}, "'problem' must be a string"),
        (
            {"problem": "Q", "answer": "A", "data_type": "audio"},
            "data_type 'audio' is not one of video, image, text",
        ),
        ({"problem": "Q", "answer": "A", "data_type": "video"}, "names no video"),
        ({"problem": "Q", "answer": "A", "data_type": "image", "videos": ["v.mp4"]}, "names no image"),
        (
            {"problem": "Q", "answer": "A", "videos": "v.mp4", "options": "A. x"},
            "options must be a list of strings",
        ),
        (
            {"problem": "Q", "answer": "A", "videos": [{"bytes": "..."}]},
            "'videos' must be a path or a list of paths",
        ),
        ({"problem": "Q", "answer": "A", "has_offline_trajectory": True}, "offline_output is missing"),
        ({"problem": "Q", "answer": "A", "problem_type": 3}, "problem_type must be a string"),
        ([1, 2], "a row must be a JSON object"),
    ],
)
def test_invalid_rows_name_file_and_line(tmp_path: Path, row: object, message: str) -> None:
    data = _jsonl(tmp_path / "bad.jsonl", [{"problem": "fine", "answer": "A"}, row])
    with pytest.raises(DataError, match=message) as info:
        load_samples(data)
    assert str(info.value).startswith(f"{data}:2: ")


def test_unknown_problem_type_against_the_known_ones(tmp_path: Path) -> None:
    data = _jsonl(tmp_path / "d.jsonl", [EVR1_ROW, {**EVR1_ROW, "problem_id": "x", "problem_type": "haiku"}])
    with pytest.raises(
        DataError, match=r"d.jsonl:2: unknown problem_type 'haiku' .*known: multiple choice, numerical"
    ):
        load_samples(data, problem_types={"numerical", "multiple choice"})
    assert len(load_samples(data)) == 2  # without a set of known types, any type is accepted


def test_duplicate_ids_and_bad_json(tmp_path: Path) -> None:
    data = _jsonl(tmp_path / "d.jsonl", [EVR1_ROW, {"problem": "p"}, EVR1_ROW])
    with pytest.raises(
        DataError, match=r"d.jsonl:3: duplicate sample id 'evr1_000123' \(first at .*d.jsonl:1\)"
    ):
        load_samples(data, require_answer=False)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"problem": "a", "answer": "b"}\n\n{"problem": "a", "answer": }\n')
    with pytest.raises(DataError, match=r"broken.jsonl:3:\d+: invalid JSON"):
        load_samples(broken)
    array = tmp_path / "broken.json"
    array.write_text('[\n  {"problem": "a", "answer": "b"},\n  {"problem": "a" "answer": "b"}\n]')
    with pytest.raises(DataError, match=r"broken.json:3:\d+: invalid JSON"):
        load_samples(array)
    with pytest.raises(DataError, match="dataset file not found"):
        load_samples(tmp_path / "absent.jsonl")


def test_errors_can_be_collected_instead_of_raised(tmp_path: Path) -> None:
    data = _jsonl(
        tmp_path / "d.jsonl",
        [{"problem": "a", "answer": "b"}, {"answer": "b"}, {"problem": "c", "answer": "d"}],
    )
    errors: list[DataError] = []
    samples = load_samples(data, errors=errors)
    assert (
        [s.problem for s in samples] == ["a", "c"]
        and len(errors) == 1
        and ":2: missing the question" in str(errors[0])
    )


def test_plain_video_lists(tmp_path: Path) -> None:
    listing = tmp_path / "videos.txt"
    listing.write_text("# clips\na.mp4\n\n /abs/b c.mp4 \nsub/é.mkv\n")
    samples = load_samples(listing)
    assert [s.videos for s in samples] == [
        [str(tmp_path / "a.mp4")],
        ["/abs/b c.mp4"],
        [str(tmp_path / "sub/é.mkv")],
    ]
    assert [s.id for s in samples] == [f"{listing}:2", f"{listing}:4", f"{listing}:5"]
    assert all(s.data_type == "video" and s.ground_truth is None for s in samples)
    as_json = tmp_path / "videos.json"
    as_json.write_text('["x.mp4", "y.mp4"]')
    assert [s.videos[0] for s in load_samples(as_json)] == [str(tmp_path / "x.mp4"), str(tmp_path / "y.mp4")]


def test_a_folder_or_a_single_video(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("d/b.mp4", "d/sub/a.webm", "d/notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    assert [s.id for s in load_samples(tmp_path / "d")] == ["b.mp4", "sub/a.webm"]
    (single,) = load_samples(tmp_path / "d" / "b.mp4")
    assert single.videos == [str(tmp_path / "d" / "b.mp4")]


def test_invalid_and_too_deep_jsonl_lines_are_collected_with_where(tmp_path: Path) -> None:
    from videorl.data.loaders import RowError

    good = json.dumps({"problem": "Q", "answer": "A"})
    path = tmp_path / "rows.jsonl"
    path.write_text(f"{good}\n{{broken\n" + "[" * 100_000 + "]" * 100_000 + f"\n{good.replace('Q', 'R')}\n")
    errors: list[DataError] = []
    samples = load_samples(path, errors=errors)
    assert [s.problem for s in samples] == ["Q", "R"]
    assert [(type(e), e.where) for e in errors] == [(RowError, f"{path}:2"), (RowError, f"{path}:3")]  # type: ignore[attr-defined]
    assert str(errors[1]) == f"{path}:3: nested too deeply to read"
    with pytest.raises(DataError, match=r"rows.jsonl:2:2: invalid JSON"):
        load_samples(path)
    array = tmp_path / "rows.json"
    array.write_text("[" + "[" * 100_000 + "]" * 100_000 + "]")
    with pytest.raises(DataError, match=r"rows.json:1: nested too deeply to read"):
        load_samples(array)
