"""The frame cache as a careless user or a damaged disk meets it: links out of the cache, entries that
fail their checksum or key, invalid dataset lines, a full disk, deduplicated videos, and the build
parameters taken from a training config or a model."""

from __future__ import annotations

import errno
import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from videorl.media import CorruptEntryError, DecodeParams, MediaCache
from videorl.testing import CliResult

MakeClip = Callable[..., Path]
RunCli = Callable[..., CliResult]
P = DecodeParams(factor=28, temporal_patch_size=2)
FLAGS = ["--factor", "28", "--workers", "1", "--quiet"]


def _report(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _flip(path: Path, offset_from_end: int) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the cache holding what gc must never delete, and a cache that links to it."""
    folder = tmp_path / "precious"
    (folder / "ab").mkdir(parents=True)
    (folder / "weights.safetensors").write_bytes(b"model weights")
    (folder / "ab" / "nested.safetensors").write_bytes(b"more weights")
    (folder / "notes.json").write_text("{}")
    return folder


def test_gc_verify_and_stats_never_follow_links_out_of_the_cache(
    run_cli: RunCli, make_clip: MakeClip, tmp_path: Path, outside: Path
) -> None:
    cache_dir = tmp_path / "cache"
    cache = MediaCache(cache_dir)
    cache.get_or_build(make_clip("a.mp4", frames=8), P)
    (cache.entries_dir / "zz").symlink_to(outside)  # a linked shard folder
    (cache.entries_dir / "zz-file.safetensors").symlink_to(outside / "weights.safetensors")
    shard = next(p for p in cache.entries_dir.iterdir() if p.is_dir() and not p.is_symlink())
    (shard / "linked.safetensors").symlink_to(outside / "weights.safetensors")
    (cache.sources_dir / "linked.json").symlink_to(outside / "notes.json")
    (cache_dir / "tmp").symlink_to(outside)  # temp_files walks every folder of the root
    (outside / ".x.safetensors.tmp-1-abcd.tmp").write_bytes(b"someone else's temporary file")
    (tmp_path / "keep.txt").write_text("")  # keep nothing: every entry of the cache goes

    verify = run_cli("cache", "verify", str(cache_dir), "--quiet", "--delete-bad", "--json")
    assert verify.exit_code == 0, verify.output + verify.stderr
    result = verify.json()
    assert result["entries"] == 1 and result["temp_files"] == []
    assert len(result["links_not_followed"]) == 4
    stats = run_cli("cache", "stats", str(cache_dir), "--json").assert_success().json()
    assert stats["entries"] == 1 and stats["links_not_followed"] == 4

    gc = run_cli("cache", "gc", str(cache_dir), "--keep", str(tmp_path / "keep.txt")).assert_success()
    assert "deleted 1 entries" in gc.output and "were not followed" in gc.stderr
    assert sorted(str(p.relative_to(outside)) for p in outside.rglob("*")) == [
        ".x.safetensors.tmp-1-abcd.tmp",
        "ab",
        "ab/nested.safetensors",
        "notes.json",
        "weights.safetensors",
    ]
    assert (outside / "weights.safetensors").read_bytes() == b"model weights"


def test_build_rebuilds_an_entry_with_another_key_or_a_bad_checksum(
    run_cli: RunCli, make_clip: MakeClip, tmp_path: Path
) -> None:
    a, b = make_clip("a.mp4", frames=8), make_clip("b.mp4", frames=12)
    cache = MediaCache(tmp_path / "cache")
    ref_a, ref_b = cache.get_or_build(a, P), cache.get_or_build(b, P)
    entry_a, entry_b = cache.entry_path(ref_a.key or ""), cache.entry_path(ref_b.key or "")
    good_a, _ = cache.load_numpy(ref_a, P)
    entry_a.write_bytes(entry_b.read_bytes())  # a's name, b's frames and key: a header check catches it
    build = ["cache", "build", str(a), str(b), "--cache-dir", str(tmp_path / "cache"), *FLAGS]
    result = run_cli(*build).assert_success()
    assert "(1 decoded now, 1 already cached)" in result.output
    assert (cache.load_numpy(ref_a, P)[0] == good_a).all()

    _flip(entry_a, 100)  # same size, bad frames: only a full read sees it
    assert "(0 decoded now, 2 already cached)" in run_cli(*build).assert_success().output
    result = run_cli(*build, "--verify").assert_success()
    assert "(1 decoded now, 1 already cached)" in result.output
    cache.load_numpy(ref_a, P)  # whole again


def test_a_load_that_finds_a_damaged_entry_names_the_build_that_fixes_it(
    run_cli: RunCli, make_clip: MakeClip, tmp_path: Path
) -> None:
    """train in preprocessed_only mode meets a corrupt entry: the command the error names repairs it,
    without --verify (the load left a note), so training does not loop on the same error."""
    clip = make_clip("a.mp4", frames=8)
    cache_dir = tmp_path / "cache"
    ref = MediaCache(cache_dir).get_or_build(clip, P)
    entry = MediaCache(cache_dir).entry_path(ref.key or "")
    _flip(entry, 100)
    training = MediaCache(cache_dir, "preprocessed_only")
    with pytest.raises(CorruptEntryError, match="checksum mismatch") as info:
        training.load_numpy(ref, P)
    command = str(info.value).split("Rebuild it (the build checks and replaces this entry): ", 1)[1]
    assert command.startswith("videorl cache build DATA --cache-dir")
    args = [str(clip) if a == "DATA" else a for a in shlex.split(command)[1:]]
    result = run_cli(*args, "--quiet").assert_success()
    assert "(1 decoded now, 0 already cached)" in result.output
    frames, _ = training.load_numpy(ref, P)
    assert frames.shape[0] == 4 and not list(cache_dir.rglob("*.broken"))  # min_frames of 8 frames at 30 fps


def test_one_invalid_json_line_is_reported_with_where_and_the_rest_is_cached(
    run_cli: RunCli, make_clip: MakeClip, tmp_path: Path
) -> None:
    make_clip("a.mp4", frames=8)
    make_clip("b.mp4", frames=9)
    data = tmp_path / "train.jsonl"
    rows = [{"problem": "<video>Q", "videos": ["a.mp4"]}, {"problem": "<video>Q", "videos": ["b.mp4"]}]
    data.write_text(json.dumps(rows[0]) + "\n{not json\n" + json.dumps(rows[1]) + "\n")
    result = run_cli("cache", "build", str(data), "--cache-dir", str(tmp_path / "cache"), *FLAGS)
    assert result.exit_code == 1
    assert "2 of 2 videos cached" in result.output
    assert _report(tmp_path / "cache" / "build-failures.jsonl") == [
        {"sample": None, "where": f"{data}:2", "video": None, "stage": "dataset",
         "reason": f"{data}:2:2: invalid JSON: Expecting property name enclosed in double quotes"}
    ]  # fmt: skip


def test_a_utf8_bom_is_accepted(make_clip: MakeClip, tmp_path: Path) -> None:
    from videorl.data import load_samples

    make_clip("a.mp4", frames=8)
    row = {"problem": "<video>Q", "answer": "A", "videos": ["a.mp4"]}
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + json.dumps(row).encode() + b"\n")
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps([row]).encode())
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfa.mp4\n")
    for name in ("bom.jsonl", "bom.json", "bom.txt"):
        [sample] = load_samples(tmp_path / name)
        assert sample.videos == [str(tmp_path / "a.mp4")], name


def test_a_failure_on_a_deduplicated_video_names_the_path_of_its_row(
    run_cli: RunCli, make_clip: MakeClip, tmp_path: Path
) -> None:
    bad = make_clip("first.mp4", frames=30)
    bad.write_bytes(bad.read_bytes()[:3000])  # truncated...
    (tmp_path / "second.mp4").write_bytes(bad.read_bytes())  # ...and a copy of it under another name
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"problem_id": n, "problem": "Q", "videos": [f"{n}.mp4"]}) + "\n"
                            for n in ("first", "second")))  # fmt: skip
    result = run_cli("cache", "build", str(data), "--cache-dir", str(tmp_path / "cache"), *FLAGS)
    assert result.exit_code == 1
    by_sample = {r["sample"]: r for r in _report(tmp_path / "cache" / "build-failures.jsonl")}
    first, second = str(tmp_path / "first.mp4"), str(tmp_path / "second.mp4")
    assert first in by_sample["first"]["reason"] and "decoded as" not in by_sample["first"]["reason"]
    assert by_sample["second"]["reason"].startswith(second)
    assert by_sample["second"]["reason"].endswith(f"(decoded as {first}, a file with the same content)")


def test_a_full_disk_for_the_failure_report_still_prints_the_summary(
    run_cli: RunCli, make_clip: MakeClip, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import videorl.atomic

    make_clip("a.mp4", frames=8)
    cache_dir = tmp_path / "cache"
    real = videorl.atomic.atomic_write

    def full(path: Any, write: Any) -> None:
        if Path(path).name == "build-failures.jsonl":
            real(path, lambda tmp: (tmp.write_bytes(b"half"), _raise_enospc()))
        else:
            real(path, write)

    monkeypatch.setattr(videorl.atomic, "atomic_write", full)
    result = run_cli("cache", "build", str(tmp_path / "a.mp4"), str(tmp_path / "missing.mp4"),
                     "--cache-dir", str(cache_dir), *FLAGS)  # fmt: skip
    assert result.exit_code == 1 and result.exception is None
    assert "1 of 2 videos cached" in result.output
    assert (
        f"the failure report {cache_dir / 'build-failures.jsonl'} was not written: disk full at {cache_dir}"
        in result.stderr
    )
    assert (
        f"failed: {tmp_path / 'missing.mp4'}" in result.stderr
        and "missing.mp4: file not found" in result.stderr
    )
    assert not [p for p in cache_dir.iterdir() if p.is_file()]  # no report, no temporary file
    assert len(list(MediaCache(cache_dir).entry_paths())) == 1  # what was complete is kept


def _raise_enospc() -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.slow
def test_build_takes_the_factor_and_budget_from_a_model_or_a_training_config(
    run_cli: RunCli, make_clip: MakeClip, tmp_path: Path
) -> None:
    from videorl.media.cache import params_id
    from videorl_models.tiny import build_tiny

    make_clip("a.mp4", frames=8)
    data = tmp_path / "train.jsonl"
    data.write_text(
        json.dumps({"problem": "<video>Q", "answer": "A", "videos": ["a.mp4"], "problem_type": "numerical"})
        + "\n"
    )
    model = build_tiny("qwen3_vl", tmp_path / "model")
    by_model = run_cli(
        "cache", "build", str(data), "--cache-dir", str(tmp_path / "c1"), "--model", str(model), "--quiet"
    )
    by_model.assert_success()
    qwen3 = DecodeParams(
        factor=32, temporal_patch_size=2, min_pixels=4096, max_pixels=262144, fps=2.0, max_frames=128
    )
    assert json.loads(by_model.output.split("parameters ", 1)[1]) == qwen3.to_dict()

    config = tmp_path / "train.yaml"
    config.write_text(
        f"model:\n  path: {model}\ndata:\n  train_files: [{data}]\n  cache_dir: {tmp_path / 'c2'}\n"
        "  source_mode: preprocessed_only\n  video_max_frames: 6\n  video_max_pixels: 50176\n"
    )
    by_config = run_cli("cache", "build", "--config", str(config), "--quiet", "--fps", "1").assert_success()
    expected = DecodeParams(
        factor=32, temporal_patch_size=2, min_pixels=4096, max_pixels=50176, fps=1.0, max_frames=6
    )
    assert (
        json.loads(by_config.output.split("parameters ", 1)[1]) == expected.to_dict()
    )  # --fps given: it wins
    [entry] = MediaCache(tmp_path / "c2").entry_paths()
    assert entry.name.endswith(f"-{params_id(expected)}.safetensors")
    neither = run_cli("cache", "build", str(data), "--cache-dir", str(tmp_path / "c3"))
    assert neither.exit_code == 2 and "--config CONFIG / --model DIR" in neither.output + neither.stderr
