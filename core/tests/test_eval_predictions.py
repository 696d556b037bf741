"""Predictions files: reading by id, resumable appends, torn final lines, malformed records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from videorl.errors import DataError
from videorl.eval import append_prediction, read_predictions
from videorl.eval.predictions import tool_summary


def test_append_then_read_last_record_per_id_wins(tmp_path: Path) -> None:
    path = tmp_path / "run" / "bench" / "predictions.jsonl"
    append_prediction(path, {"id": "a", "response": "B", "num_output_tokens": 3})
    append_prediction(path, {"id": 2, "error": "missing video /x.mp4"})
    append_prediction(path, {"id": "a", "response": "C"})  # re-run after a resume
    preds = read_predictions(path)
    assert set(preds) == {"a", "2"}
    assert preds["a"].response == "C" and not preds["a"].failed
    assert preds["2"].failed and preds["2"].error == "missing video /x.mp4"
    assert preds["a"].record == {"id": "a", "response": "C"}


def test_torn_final_line_is_ignored_and_the_next_append_starts_a_new_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    torn = '{"id": "b", "response": "' + "x" * 200_000  # longer than one backward read
    path.write_text(json.dumps({"id": "a", "response": "A"}) + "\n" + torn)
    assert list(read_predictions(path)) == ["a"]
    append_prediction(path, {"id": "b", "response": "B"})
    assert {k: p.response for k, p in read_predictions(path).items()} == {"a": "A", "b": "B"}


def test_malformed_lines_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "response": "A"}\nnot json\n{"id": "c", "response": "C"}\n')
    with pytest.raises(DataError, match=r"p\.jsonl:2: not valid JSON"):
        read_predictions(path)
    path.write_text('{"id": "a", "response": "A"}\n{"id": "b"}\n')
    with pytest.raises(DataError, match=r"p\.jsonl:2: record 'b' has neither 'response' nor 'error'"):
        read_predictions(path)
    path.write_text('{"response": "A"}\n')
    with pytest.raises(DataError, match=r"p\.jsonl:1: field 'id'"):
        read_predictions(path)
    path.write_text('{"id": "a", "response": 3}\n')
    with pytest.raises(DataError, match="'response' of 'a' must be a string"):
        read_predictions(path)
    path.write_text('{"id": "a", "response": "x", "judge_score": 2}\n')
    with pytest.raises(DataError, match="'judge_score' of 'a' must be a number in"):
        read_predictions(path)
    with pytest.raises(DataError, match="does not exist"):
        read_predictions(tmp_path / "none.jsonl")
    with pytest.raises(DataError, match="neither 'response' nor 'error'"):
        append_prediction(path, {"id": "z"})


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"turns": -1}, r"p\.jsonl:2: 'turns' of 'b' must be a whole number >= 0"),
        ({"turns": True}, "'turns' of 'b' must be a whole number"),
        ({"turns": 1, "tool_calls": {"name": "seek"}}, r"p\.jsonl:2: 'tool_calls' of 'b' must be a list"),
        ({"turns": 1, "tool_calls": [{"name": "seek"}]}, "a boolean 'valid'"),
        ({"turns": 1, "tool_calls": [{"name": 3, "valid": True}]}, "a string 'name'"),
        (
            {"turns": 1, "tool_calls": [{"name": "seek", "valid": True, "frames": -2}]},
            "a whole number 'frames'",
        ),
    ],
)
def test_a_workflows_fields_are_checked_where_present(
    tmp_path: Path, fields: dict[str, object], says: str
) -> None:
    path = tmp_path / "p.jsonl"
    good = {
        "id": "a",
        "response": "A",
        "turns": 2,
        "tool_calls": [{"name": "seek", "valid": True, "frames": 1}],
    }
    path.write_text(json.dumps(good) + "\n" + json.dumps({"id": "b", "response": "B", **fields}) + "\n")
    with pytest.raises(DataError, match=says):
        read_predictions(path)


def test_tool_summary_sums_the_rows_answered_through_a_workflow(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    rows = [
        {"id": "a", "response": "A", "turns": 3, "end": "stop", "tool_calls": [
            {"name": "seek", "valid": True, "frames": 1},
            {"name": "get_frames", "valid": False, "frames": 0}]},
        {"id": "b", "response": "B", "turns": 1, "end": "length", "tool_calls": []},
        {"id": "c", "error": "missing video"},  # failed rows did not run the loop: not counted
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert tool_summary(read_predictions(path).values()) == {
        "samples": 2, "turns_per_sample": 2.0, "calls_per_sample": 1.0, "calls": {"get_frames": 1, "seek": 1},
        "invalid_calls": 1, "frames": 1, "ends": {"length": 1, "stop": 1},
    }  # fmt: skip
    assert tool_summary([]) is None  # no row through a workflow: no tools in the summary
