"""``videorl cache build|verify|stats|gc`` end to end on synthetic videos, bad ones included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from videorl.media import DecodeParams, MediaCache, read_entry
from videorl.media.cache import ENTRY_SUFFIX
from videorl.media.synthetic import write_audio_only
from videorl.testing import CliResult

MakeClip = Callable[..., Path]
RunCli = Callable[..., CliResult]
P = DecodeParams(factor=28, temporal_patch_size=2)
FLAGS = ["--factor", "28", "--workers", "2", "--quiet"]


def _report(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def datasets(make_clip: MakeClip, tmp_path: Path) -> dict[str, Path]:
    """An EasyVideoR1 JSONL, a Video-R1 JSON and a video list, with every kind of bad video."""
    good = make_clip("videos/good.mp4", frames=60)
    make_clip("videos/one frame.mp4", frames=1)
    make_clip("videos/vidéo été.mp4", frames=30)
    (tmp_path / "videos/copy.mp4").write_bytes(good.read_bytes())  # same content, other path
    truncated = make_clip("videos/truncated.mp4", frames=60)
    truncated.write_bytes(truncated.read_bytes()[:2000])
    (tmp_path / "videos/empty.mp4").write_bytes(b"")
    (tmp_path / "videos/readme.mp4").write_text("not a video\n" * 10)
    write_audio_only(tmp_path / "videos/audio.mp4")
    evr1 = [
        {
            "problem_id": "e1",
            "problem": "<video>Q",
            "answer": "A",
            "videos": ["videos/good.mp4"],
            "problem_type": "multiple choice",
        },
        {"problem_id": "e2", "problem": "<video>Q", "answer": "B", "videos": ["videos/good.mp4"]},
        {"problem_id": "e3", "problem": "<video>Q", "answer": "C", "videos": ["videos/missing.mp4"]},
        {"problem_id": "e4", "problem": "<video>Q", "answer": "D", "videos": ["videos/truncated.mp4"]},
        {"problem_id": "e5", "answer": "no question"},
        {"problem_id": "e6", "problem": "text only", "answer": "4"},
    ]
    vr1 = [
        {
            "problem_id": 1,
            "problem": "Q",
            "solution": "<answer>A</answer>",
            "path": "./videos/one frame.mp4",
            "data_type": "video",
        },
        {
            "problem_id": 2,
            "problem": "Q",
            "solution": "<answer>B</answer>",
            "path": "./videos/vidéo été.mp4",
            "data_type": "video",
        },
        {
            "problem_id": 3,
            "problem": "Q",
            "solution": "<answer>C</answer>",
            "path": "./videos/readme.mp4",
            "data_type": "video",
        },
        {
            "problem_id": 4,
            "problem": "Q",
            "solution": "<answer>D</answer>",
            "path": "./videos/audio.mp4",
            "data_type": "video",
        },
    ]
    files = {
        "evr1": tmp_path / "train.jsonl",
        "vr1": tmp_path / "Video-R1.json",
        "list": tmp_path / "more.txt",
    }
    files["evr1"].write_text("".join(json.dumps(r) + "\n" for r in evr1))
    files["vr1"].write_text(json.dumps(vr1))
    files["list"].write_text("videos/copy.mp4\nvideos/empty.mp4\n")
    return files


def test_build_reports_every_bad_video_and_goes_on(
    run_cli: RunCli, datasets: dict[str, Path], tmp_path: Path
) -> None:
    cache_dir = tmp_path / "cache"
    args = ["cache", "build", *map(str, datasets.values()), "--cache-dir", str(cache_dir), *FLAGS]
    result = run_cli(*args)
    assert result.exit_code == 1, result.output + result.stderr
    # 9 distinct paths; good.mp4 and copy.mp4 share their content: 4 paths cached as 3 entries
    assert "4 of 9 videos cached" in result.output and "(3 decoded now, 0 already cached)" in result.output
    assert "FAILED: 5 videos, 1 dataset rows or files" in result.stderr
    report = _report(cache_dir / "build-failures.jsonl")
    by_sample = {(r["sample"], r["stage"]): r for r in report}
    assert len(report) == 6
    assert set(by_sample) == {
        (None, "dataset"),
        ("e3", "fingerprint"),
        ("e4", "decode"),
        ("3", "decode"),
        ("4", "decode"),
        (f"{datasets['list']}:2", "decode"),
    }
    assert "train.jsonl:5: missing the question" in by_sample[(None, "dataset")]["reason"]
    assert by_sample[("e3", "fingerprint")]["reason"].endswith("missing.mp4: file not found")
    assert "truncated" in by_sample[("e4", "decode")]["reason"]
    assert by_sample[("e4", "decode")]["where"] == f"{datasets['evr1']}:4"
    assert "not a media file" in by_sample[("3", "decode")]["reason"]
    assert "no video stream" in by_sample[("4", "decode")]["reason"]
    assert "empty" in by_sample[(f"{datasets['list']}:2", "decode")]["reason"]
    assert len(list(MediaCache(cache_dir).entry_paths())) == 3

    again = run_cli(*args)  # incremental: nothing decoded twice, the same failures
    assert again.exit_code == 1 and "(0 decoded now, 3 already cached)" in again.output
    assert _report(cache_dir / "build-failures.jsonl") == report

    clean = tmp_path / "clean.txt"
    clean.write_text("videos/good.mp4\nvideos/one frame.mp4\n")
    ok = run_cli(
        "cache",
        "build",
        str(clean),
        "--cache-dir",
        str(cache_dir),
        *FLAGS,
        "--failures",
        str(tmp_path / "f.jsonl"),
    )
    ok.assert_success()
    assert "2 of 2 videos cached" in ok.output and (tmp_path / "f.jsonl").read_text() == ""


def test_build_kills_a_video_past_its_timeout(run_cli: RunCli, make_clip: MakeClip, tmp_path: Path) -> None:
    make_clip("a.mp4", frames=8)
    make_clip("b.mp4", frames=9)
    result = run_cli(
        "cache",
        "build",
        str(tmp_path / "a.mp4"),
        str(tmp_path / "b.mp4"),
        "--cache-dir",
        str(tmp_path / "cache"),
        *FLAGS,
        "--timeout",
        "0.000001",
    )
    assert result.exit_code == 1
    report = _report(tmp_path / "cache" / "build-failures.jsonl")
    assert [(r["stage"], r["reason"]) for r in report] == [("timeout", "timed out after 1e-06 s")] * 2


def test_build_rejects_bad_parameters(run_cli: RunCli, make_clip: MakeClip, tmp_path: Path) -> None:
    clip = str(make_clip(frames=8))
    missing_factor = run_cli("cache", "build", clip, "--cache-dir", str(tmp_path / "c"))
    assert missing_factor.exit_code == 2 and "--factor" in missing_factor.output + missing_factor.stderr
    bad = run_cli(
        "cache",
        "build",
        clip,
        "--cache-dir",
        str(tmp_path / "c"),
        "--factor",
        "28",
        "--min-pixels",
        "9",
        "--max-pixels",
        "8",
    )
    assert bad.exit_code == 2 and "min_pixels" in bad.output + bad.stderr


def test_verify_finds_corrupt_entries_and_leftovers(
    run_cli: RunCli, make_clip: MakeClip, tmp_path: Path
) -> None:
    cache = MediaCache(tmp_path / "cache")
    refs = [cache.get_or_build(make_clip(f"{n}.mp4", frames=n), P) for n in (20, 30)]
    verify = ["cache", "verify", str(tmp_path / "cache"), "--quiet"]
    ok = run_cli(*verify).assert_success()
    assert "2 of 2 entries OK, 0 corrupt, 0 temporary files" in ok.output

    entry = cache.entry_path(refs[0].key or "")
    data = bytearray(entry.read_bytes())
    data[-100] ^= 0xFF
    entry.write_bytes(bytes(data))
    leftover = entry.with_name(f".{entry.name}.tmp-999-deadbeef")  # an older videorl's: no writer named
    leftover.write_bytes(b"half")
    os.utime(leftover, (time.time() - 7200, time.time() - 7200))  # so removed after the grace period
    bad = run_cli(*verify, "--json")
    assert bad.exit_code == 1
    result = bad.json()
    assert (result["entries"], result["ok"]) == (2, 1) and result["temp_files"] == [str(leftover)]
    assert (
        result["corrupt"][0]["entry"] == str(entry) and "checksum mismatch" in result["corrupt"][0]["reason"]
    )

    deleted = run_cli(*verify, "--delete-bad")
    assert deleted.exit_code == 1 and f"CORRUPT {entry}" in deleted.output and "deleted" in deleted.output
    assert not entry.exists() and not leftover.exists()
    assert "1 of 1 entries OK" in run_cli(*verify).assert_success().output
    cache.get_or_build(tmp_path / "20.mp4", P)  # rebuilt
    assert read_entry(entry, framework="numpy")[1].key == refs[0].key


def test_stats_by_parameters(run_cli: RunCli, make_clip: MakeClip, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    other = DecodeParams(factor=32, temporal_patch_size=2, fps=1.0)
    cache = MediaCache(root, strict_params=False)
    for n in (60, 90):
        cache.get_or_build(make_clip(f"{n}.mp4", frames=n), P)  # 2 s and 3 s at 2 fps: 4 and 6 frames
    cache.get_or_build(tmp_path / "60.mp4", other)  # 2 s at 1 fps: min_frames 4
    result = run_cli("cache", "stats", str(root), "--json").assert_success().json()
    sizes = [p.stat().st_size for p in cache.entry_paths()]
    assert (result["entries"], result["sources"], result["bytes"]) == (3, 2, sum(sizes))
    groups = {g["params"]["factor"]: g for g in result["by_params"]}
    assert (groups[28]["entries"], groups[28]["frames"]) == (2, 10)
    assert (groups[32]["entries"], groups[32]["frames"], groups[32]["params"]["fps"]) == (1, 4, 1.0)
    text = run_cli("cache", "stats", str(root)).assert_success().output
    assert "3 entries of 2 videos" in text and "factor 32" in text


def test_gc_keeps_only_what_the_datasets_refer_to(
    run_cli: RunCli, make_clip: MakeClip, tmp_path: Path
) -> None:
    root = tmp_path / "cache"
    cache = MediaCache(root)
    for n in (10, 20, 30):
        cache.get_or_build(make_clip(f"{n}.mp4", frames=n), P)
    keep_a, keep_b = tmp_path / "a.txt", tmp_path / "b.jsonl"
    keep_a.write_text("10.mp4\n")
    keep_b.write_text(json.dumps({"problem": "Q", "answer": "A", "videos": ["20.mp4"]}) + "\n")
    (root / "entries" / ".orphan.tmp-1-abcd").write_bytes(b"x")
    os.utime(root / "entries" / ".orphan.tmp-1-abcd", (0, 0))  # no writer named, older than the grace

    dry = run_cli("cache", "gc", str(root), "--keep", str(keep_a), str(keep_b), "--dry-run").assert_success()
    assert "would delete 1 entries" in dry.output and len(list(cache.entry_paths())) == 3
    run_cli("cache", "gc", str(root), "--keep", str(keep_a), str(keep_b)).assert_success()
    kept = {read_entry(p, framework="numpy")[1].metadata.total_frames for p in cache.entry_paths()}
    assert kept == {10, 20} and not cache.temp_files()
    assert len(list((root / "sources").glob("*.json"))) == 2

    (tmp_path / "10.mp4").unlink()  # a kept video that is gone is still known by its fingerprint
    run_cli("cache", "gc", str(root), "--keep", str(keep_a)).assert_success()
    assert {read_entry(p, framework="numpy")[1].metadata.total_frames for p in cache.entry_paths()} == {10}
    assert run_cli("cache", "gc", str(root)).exit_code == 2  # no --keep: refuse rather than delete all


def test_gc_and_verify_spare_the_temporary_files_of_live_writers(
    run_cli: RunCli, make_clip: MakeClip, tmp_path: Path
) -> None:
    from videorl.atomic import temp_path

    root = tmp_path / "cache"
    cache = MediaCache(root)
    ref = cache.get_or_build(make_clip("a.mp4", frames=20), P)
    keep = tmp_path / "keep.txt"
    keep.write_text("a.mp4\n")
    entry = cache.entry_path(ref.key or "")
    live = temp_path(entry.with_name("new" + ENTRY_SUFFIX))  # this process is writing it
    live.write_bytes(b"being written")
    os.utime(live, (0, 0))  # however old: its writer runs
    code = "import sys; from videorl.atomic import temp_path; print(temp_path(sys.argv[1]))"
    dead_writer = subprocess.run(
        [sys.executable, "-c", code, str(entry.with_name("old" + ENTRY_SUFFIX))],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = Path(dead_writer.stdout.strip())
    dead.write_bytes(b"left by a killed writer")  # its writer has exited: removed at once
    elsewhere = entry.with_name(f".x{ENTRY_SUFFIX}.tmp-0badc0de-{os.getpid()}-1-abcd1234.tmp")
    elsewhere.write_bytes(b"another machine's, written just now")  # its writer cannot be checked here

    result = run_cli("cache", "verify", str(root), "--json").assert_success().json()
    assert result["temp_files"] == [str(dead)] and result["temp_files_being_written"] == 2
    run_cli("cache", "verify", str(root), "--delete-bad", "--quiet").assert_success()
    assert live.exists() and elsewhere.exists() and not dead.exists()
    dead.write_bytes(b"again")
    gc = run_cli("cache", "gc", str(root), "--keep", str(keep)).assert_success()
    assert "deleted 0 entries and 1 other files" in gc.output
    assert live.exists() and elsewhere.exists() and not dead.exists()
    os.replace(live, entry.with_name("new" + ENTRY_SUFFIX))  # the live writer's rename still works

    os.utime(elsewhere, (time.time() - 3601, time.time() - 3601))  # past the grace period
    run_cli("cache", "gc", str(root), "--keep", str(keep)).assert_success()
    assert not elsewhere.exists() and not cache.temp_files()
