"""The parity comparisons of ``videorl models check`` and the first-step check, on hand-made values."""

from __future__ import annotations

import pytest
import torch

from videorl.actor.parity import TOLERANCES, CheckResult, ParityReport, tolerance_for
from videorl.diagnostics.comparisons import (
    compare_frame_metadata,
    compare_greedy,
    compare_ids,
    compare_logprobs,
    compare_positions,
    first_difference,
    ids_result_from_error,
    visual_spans,
)
from videorl.episode import Episode, Segment
from videorl.errors import AlignmentError
from videorl.generation import Completion


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2  # a prefix differs where it ends


def test_prompt_ids_report_the_first_difference_and_the_expansion() -> None:
    row = compare_ids("v", [7, 8, 9, 9, 9, 10], [7, 8, 9, 9, 10])
    assert (row.status, row.position, row.trainer, row.engine) == ("FAIL", 4, [9, 10], [10])
    assert "-1 tokens" in row.cause and "fps missing on the engine side?" in row.cause
    assert compare_ids("v", [1, 2], [1, 2]).status == "PASS"


def test_prompt_ids_from_the_engine_s_own_alignment_error() -> None:
    from videorl.alignment import check_same_prompt

    with pytest.raises(AlignmentError) as err:
        check_same_prompt("s1", [1, 2, 3, 4], [1, 2, 6, 4], where="vLLM")
    row = ids_result_from_error("s1", err.value)
    assert (row.status, row.position, row.trainer, row.engine) == ("FAIL", 2, "[3, 4]", "[6, 4]")
    assert row.cause.startswith("same length, other ids")


def test_visual_spans() -> None:
    assert visual_spans([0, 2, 2, 0, 1, 1, 1, 2]) == [(2, 1, 2), (1, 4, 3), (2, 7, 1)]
    assert visual_spans([0, 0]) == []


META = {"fps": 30.0, "frames_indices": [0, 15, 30, 45], "total_num_frames": 120, "duration": 4.0, "width": 56}


def test_frame_metadata_missing_or_differing_on_the_engine_side() -> None:
    assert compare_frame_metadata("v", [META], [dict(META)]).status == "PASS"
    missing = compare_frame_metadata("v", [META], [{k: v for k, v in META.items() if k != "fps"}])
    assert (missing.status, missing.position, missing.trainer, missing.engine) == (
        "FAIL",
        0,
        "fps=30",
        "missing",
    )
    assert missing.cause.startswith("fps missing on the engine side (video 0)")
    other = compare_frame_metadata("v", [META, META], [META, {**META, "frames_indices": [0, 14, 30, 45]}])
    assert (other.status, other.position) == ("FAIL", 1) and "frames_indices differs" in other.cause
    assert compare_frame_metadata("v", [META], [None]).status == "n/a"  # a backend sending bare frames
    assert compare_frame_metadata("t", [], []).status == "n/a"


def test_positions_name_where_they_part() -> None:
    # text 0-1, a video run at 2-5, then text: the engine resumes at 9, the model at 5
    spans = [(2, 2, 4)]
    engine = torch.tensor([[0, 1, 2, 2, 6, 6, 9, 10], [0, 1, 2, 3, 2, 3, 9, 10], [0, 1, 2, 2, 2, 2, 9, 10]])
    trainer = engine.clone()
    trainer[:, 6:] = torch.tensor([5, 6])
    row = compare_positions("v", trainer, engine, spans)
    assert (row.status, row.position, row.trainer, row.engine) == ("FAIL", 6, [5, 5, 5], [9, 9, 9])
    assert row.cause.startswith("rope positions after the video differ")
    assert compare_positions("v", engine, engine.clone(), spans).status == "PASS"
    assert compare_positions("t", None, None, [], "no 3-D positions").status == "n/a"


def test_greedy_tolerates_a_near_tie_only() -> None:
    assert compare_greedy("s", [1, 2, 3], [1, 2, 3], [0.0, 0.0, 0.0], 1e-4).status == "PASS"
    tie = compare_greedy("s", [1, 2, 3], [1, 5, 3], [0.0, 5e-5, 0.0], 1e-4)
    assert (tie.status, tie.position) == ("PASS", 1) and "near tie" in tie.cause
    real = compare_greedy("s", [1, 2, 3], [1, 5, 3], [0.0, 0.3, 0.0], 1e-4)
    assert (real.status, real.position, real.trainer, real.engine) == ("FAIL", 1, 5, 2)


def test_logprobs_fail_at_the_first_token_beyond_the_tolerance() -> None:
    ok = compare_logprobs("s", [-1.0, -2.0], [-1.00001, -2.00002], 1e-4)
    assert ok.status == "PASS"
    bad = compare_logprobs("s", [-1.0, -2.0, -3.0], [-1.0, -2.5, -3.2], 1e-4)
    assert (bad.status, bad.position, bad.trainer, bad.engine) == ("FAIL", 1, -2.5, -2.0)
    assert "max |diff| 0.5" in bad.cause and "during the response" in bad.cause
    assert compare_logprobs("s", [float("nan")], [-1.0], 1.0).status == "FAIL"


def test_a_sampled_forbidden_token_is_named() -> None:
    """The trainer masks the backend's forbidden ids (log-prob -inf): an engine that samples one fails
    with the token's id and what the engine must do, not as a generic gap."""
    bad = compare_logprobs("s", [-1.0, -6.0], [-1.0, float("-inf")], 1e-4, tokens=[5, 151656])
    assert (bad.status, bad.position) == ("FAIL", 1)
    assert "sampled token 151656" in bad.cause and "forbidden_token_ids" in bad.cause
    assert "sampled token" not in compare_logprobs("s", [-6.0], [-5.0], 1e-4, tokens=[3]).cause


def test_tolerances_per_dtype() -> None:
    assert tolerance_for("float32") == TOLERANCES["float32"]
    assert tolerance_for("bfloat16").token > tolerance_for("float32").token
    custom = tolerance_for("bfloat16", 0.5)
    assert custom.token == 0.5 and custom.mean == pytest.approx(0.1)  # the mean limit scales along


def test_report_table_and_json() -> None:
    report = ParityReport("m", "vllm", "float32", TOLERANCES["float32"])
    report.add(CheckResult("video", "prompt_ids", "PASS", trainer="10 ids", engine="10 ids"))
    report.add(CheckResult("video", "logprobs", "FAIL", 3, -1.5, -1.25, "the forward differs"))
    lines = report.table().splitlines()
    assert lines[0].split() == [
        "sample",
        "check",
        "result",
        "position",
        "trainer",
        "engine",
        "likely",
        "cause",
    ]
    assert lines[2].split()[:6] == ["video", "logprobs", "FAIL", "3", "-1.5", "-1.25"]
    assert lines[-1].endswith("FAIL (1 of 2 checks)")
    assert not report.ok and report.to_json()["results"][1]["position"] == 3


def _trajectory(sample_id: str, kind: str, logprobs: list[float]) -> object:
    from types import SimpleNamespace

    from videorl.backend import PromptInput

    videos = [object()] if kind == "video" else []
    images = [object()] if kind == "image" else []
    encoded = SimpleNamespace(prompt=PromptInput(sample_id, "q", videos=videos, images=images))  # type: ignore[arg-type]
    prompt = SimpleNamespace(sample=SimpleNamespace(id=sample_id), require_encoded=lambda: encoded)
    return Episode(prompt, 0, Completion(list(range(len(logprobs))), logprobs, "stop"))  # type: ignore[arg-type]


def test_gaps_per_modality_of_the_prompts() -> None:
    from videorl.actor.gaps import modality_gaps

    nan = float("nan")
    batch = [
        _trajectory("v1", "video", [-1.0, -2.0, -3.0]),
        _trajectory("t1", "text", [-0.5, -0.5]),
        _trajectory("v2", "video", [-1.0, -1.0]),
        _trajectory("off", "image", [nan, nan]),  # an offline response: no engine log-probs
    ]
    actor = torch.tensor([[-1.1, -2.0, -2.5], [-0.5, -0.25, 0.0], [-1.0, -1.0, 0.0], [-9.0, -9.0, 0.0]])
    gaps = modality_gaps(batch, actor)  # type: ignore[arg-type]
    assert set(gaps) == {"video", "text"}
    assert gaps["video"].count == 5 and gaps["video"].mean == pytest.approx((0.1 + 0.5) / 5)
    assert gaps["video"].worst == pytest.approx(0.5) and gaps["video"].where.startswith("sample 'v1' token 2")
    assert gaps["text"].mean == pytest.approx(0.25 / 2)


def test_gaps_of_a_multi_turn_episode_count_the_policy_s_tokens_only() -> None:
    """A tool's reply inside the response has no engine log-probs (NaN) and is not compared."""
    from videorl.actor.gaps import modality_gaps

    nan = float("nan")
    episode = _trajectory("v1", "video", [])
    episode.segments = [
        Segment([1, 2], [-1.0, -2.0]),
        Segment([3, 4, 5], [nan, nan, nan], trained=False),
        Segment([6], [-3.0]),
    ]
    actor = torch.tensor([[-1.5, -2.0, -7.0, -7.0, -7.0, -3.25]])
    gaps = modality_gaps([episode], actor)
    assert gaps["video"].count == 3 and gaps["video"].total == pytest.approx(0.5 + 0.25)
    assert gaps["video"].worst == pytest.approx(0.5)


def test_grids_and_media_items_the_engine_request_carries() -> None:
    from videorl.diagnostics.comparisons import compare_grids, compare_items

    assert compare_grids("v", [(4, 12, 16)], [(4, 12, 16)]).status == "PASS"
    resized = compare_grids("v", [(4, 12, 16), (2, 8, 8)], [(4, 12, 16), (2, 4, 4)])
    assert (resized.status, resized.position, resized.trainer, resized.engine) == (
        "FAIL",
        1,
        (2, 8, 8),
        (2, 4, 4),
    )
    assert "resized or resampled" in resized.cause
    assert compare_grids("v", [(4, 12, 16)], None, "no processor").status == "n/a"
    dropped = compare_items("two", {"video": 2, "image": 0}, {"video": 1}, "2 span(s)")
    assert (dropped.status, dropped.trainer, dropped.engine) == ("FAIL", "2 video(s)", "1 video(s)")
    assert compare_items("two", {"video": 2, "image": 0}, {"video": 2}, "2 span(s)").status == "PASS"
