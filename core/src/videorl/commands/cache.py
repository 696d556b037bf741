"""``videorl cache build|verify|stats|gc``: the frame cache from the command line.

Imports of the media stack (PyAV, numpy, safetensors) happen inside the commands, so that
``videorl --help`` stays fast.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from videorl.data import Sample
    from videorl.media import DecodeParams

_DEFAULT_WORKERS = max(1, min(4, os.cpu_count() or 1))


@click.group("cache")
def cache_group() -> None:
    """Decode videos once into the frame cache; check, summarise and prune it."""


def _decode_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--factor", type=click.IntRange(min=1), required=True,
                     help="Patch × merge size of the model: 28 for Qwen2/2.5-VL, 32 for Qwen3-VL/3.5."),
        click.option("--temporal-patch-size", type=click.IntRange(min=1), default=2, show_default=True,
                     help="Frames per temporal patch of the model; the frame count is a multiple of it."),
        click.option("--fps", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True,
                     help="Frames sampled per second of video."),
        click.option("--max-frames", type=click.IntRange(min=1), default=128, show_default=True),
        click.option("--min-frames", type=click.IntRange(min=1), default=4, show_default=True),
        click.option("--min-pixels", type=click.IntRange(min=0), default=3136, show_default=True,
                     help="Least pixels per frame."),
        click.option("--max-pixels", type=click.IntRange(min=1), default=262144, show_default=True,
                     help="Most pixels per frame."),
        click.option("--total-pixels", type=click.IntRange(min=1), default=None,
                     help="Most pixels of a whole clip, counted per temporal patch."),
        click.option("--interpolation", type=click.Choice(["bicubic", "bilinear", "area", "lanczos"]),
                     default="bicubic", show_default=True),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _params(kwargs: dict[str, Any]) -> DecodeParams:
    from videorl.errors import ConfigError
    from videorl.media import DecodeParams

    names = ("factor", "temporal_patch_size", "fps", "max_frames", "min_frames", "min_pixels", "max_pixels",
             "total_pixels", "interpolation")
    try:
        return DecodeParams(**{n: kwargs.pop(n) for n in names})
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def _load_data(paths: Iterable[Path], media_root: Path | None, failures: list[dict[str, Any]]) -> list[Sample]:
    """The samples of every DATA argument; invalid rows and unreadable files become failure lines."""
    from videorl.data import load_samples
    from videorl.errors import DataError

    samples: list[Sample] = []
    for path in paths:
        errors: list[DataError] = []
        try:
            samples += load_samples(path, media_root=media_root, require_answer=False, errors=errors)
        except DataError as exc:
            errors.append(exc)
        failures += [{"sample": None, "video": None, "reason": str(e), "stage": "dataset"} for e in errors]
    return samples


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    from videorl.atomic import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


@cache_group.command("build")
@click.argument("data", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--cache-dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The cache root (created if absent).")
@_decode_options
@click.option("--media-root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder that relative media paths are resolved against (default: each dataset's folder).")
@click.option("--workers", type=click.IntRange(min=1), default=_DEFAULT_WORKERS, show_default=True,
              help="Decoding processes.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Decoder threads per worker (default: CPU cores / workers).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds allowed per video; a slower one is killed and reported.")
@click.option("--failures", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Failure report (JSONL: sample, video, reason). Default: CACHE_DIR/build-failures.jsonl.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def build_command(
    data: tuple[Path, ...], cache_dir: Path, media_root: Path | None, workers: int, threads: int | None,
    timeout: float, failures: Path | None, quiet: bool, **decode: Any,
) -> None:
    """Decode, sample and resize every video of DATA into the cache.

    DATA: JSON/JSONL datasets (EasyVideoR1 or Video-R1 schema), .txt lists of video paths, video
    files or folders of videos. Each distinct video is decoded once; entries already present are
    kept (re-running is incremental). A bad video is reported, never fatal: the failure report lists
    sample, video and reason, and the exit code is 1 if anything failed.
    """
    from videorl.media import build_cache

    params = _params(decode)
    failed: list[dict[str, Any]] = []
    samples = _load_data(data, media_root, failed)
    users: dict[str, list[Sample]] = {}
    for sample in samples:
        for video in sample.videos:
            users.setdefault(video, []).append(sample)
    cache_dir.mkdir(parents=True, exist_ok=True)
    report = build_cache(users, params, cache_dir, workers=workers, timeout=timeout, threads=threads, progress=not quiet)
    for failure in report.failures:
        for sample in users.get(failure.video, []):
            failed.append({"sample": sample.id, "where": sample.origin, "video": failure.video,
                           "reason": failure.reason, "stage": failure.stage})
    report_path = failures or cache_dir / "build-failures.jsonl"
    _write_jsonl(report_path, failed)
    click.echo(
        f"{len(report.refs)} of {len(users)} videos cached in {report.seconds:.1f} s "
        f"({report.built} decoded now, {report.cached} already cached); parameters {params.to_json()}"
    )
    if failed:
        rows = sum(1 for f in failed if f["stage"] == "dataset")
        click.echo(f"FAILED: {len(report.failures)} videos, {rows} dataset rows or files; report: {report_path}", err=True)
        raise SystemExit(1)


@cache_group.command("verify")
@click.argument("cache_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--delete-bad", is_flag=True, help="Delete corrupt entries and temporary files left by killed writers.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def verify_command(cache_dir: Path, delete_bad: bool, as_json: bool, quiet: bool) -> None:
    """Read every entry in full: frames match the header's shape and checksum, key matches parameters.

    Exit code 1 when an entry is corrupt (rebuild it with `videorl cache build`).
    """
    import sys

    from tqdm import tqdm

    from videorl.media import CorruptEntryError, MediaCache, read_entry

    cache = MediaCache(cache_dir)
    paths = list(cache.entry_paths())
    bad: list[dict[str, str]] = []
    for path in tqdm(paths, desc="verify", unit=" entries", disable=quiet, file=sys.stderr):
        try:
            read_entry(path, framework="numpy")
        except CorruptEntryError as exc:
            bad.append({"entry": str(path), "reason": str(exc)})
    temps = cache.temp_files()
    if delete_bad:
        for item in bad:
            Path(item["entry"]).unlink(missing_ok=True)
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    result = {"entries": len(paths), "ok": len(paths) - len(bad), "corrupt": bad,
              "temp_files": [str(t) for t in temps], "deleted": delete_bad}
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        for item in bad:
            click.echo(f"CORRUPT {item['reason']}")
        for tmp in temps:
            click.echo(f"LEFTOVER {tmp} (a writer was killed before finishing; safe to delete)")
        action = "; deleted" if delete_bad and (bad or temps) else ""
        click.echo(f"{len(paths) - len(bad)} of {len(paths)} entries OK, {len(bad)} corrupt, "
                   f"{len(temps)} temporary files{action}")
    if bad:
        raise SystemExit(1)


@cache_group.command("stats")
@click.argument("cache_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def stats_command(cache_dir: Path, as_json: bool) -> None:
    """Entries, sources and bytes in the cache, by decoding parameters (headers only)."""
    from videorl.media import CorruptEntryError, MediaCache, read_header

    cache = MediaCache(cache_dir)
    groups: dict[str, dict[str, Any]] = {}
    sources: set[str] = set()
    unreadable, total = 0, 0
    for path in cache.entry_paths():
        size = path.stat().st_size
        total += size
        try:
            info = read_header(path)
        except CorruptEntryError:
            unreadable += 1
            continue
        sources.add(info.source["sha256"])
        group = groups.setdefault(info.params.to_json(), {"params": info.params.to_dict(), "entries": 0, "bytes": 0, "frames": 0})
        group["entries"] += 1
        group["bytes"] += size
        group["frames"] += info.metadata.num_frames
    temps = cache.temp_files()
    summary = {
        "cache_dir": str(cache_dir),
        "entries": sum(g["entries"] for g in groups.values()) + unreadable,
        "sources": len(sources),
        "bytes": total,
        "unreadable": unreadable,
        "temp_files": len(temps),
        "by_params": sorted(groups.values(), key=lambda g: -g["bytes"]),
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"{cache_dir}: {summary['entries']} entries of {len(sources)} videos, {_mb(total)}"
               + (f", {unreadable} unreadable" if unreadable else "") + (f", {len(temps)} temporary files" if temps else ""))
    for g in summary["by_params"]:
        p = g["params"]
        budget = f"fps {p['fps']:g}, ≤{p['max_frames']} frames, {p['min_pixels']}–{p['max_pixels']} px/frame"
        budget += f", total {p['total_pixels']}" if p["total_pixels"] else ""
        click.echo(f"  {g['entries']:>7} entries  {_mb(g['bytes']):>12}  {g['frames']:>9} frames  "
                   f"factor {p['factor']}, tps {p['temporal_patch_size']}, {budget}, {p['interpolation']}")


@cache_group.command("gc")
@click.argument("cache_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("more", nargs=-1, type=click.Path(path_type=Path))
@click.option("--keep", "keep", multiple=True, type=click.Path(path_type=Path),
              help="A dataset (or video list, video, folder) whose videos' entries are kept; repeatable.")
@click.option("--media-root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder that relative media paths are resolved against.")
@click.option("--dry-run", is_flag=True, help="Only print what would be deleted.")
def gc_command(cache_dir: Path, more: tuple[Path, ...], keep: tuple[Path, ...], media_root: Path | None, dry_run: bool) -> None:
    """Delete entries of videos that none of the --keep datasets refers to (any parameters), and
    temporary files left by killed writers. `videorl cache gc DIR --keep a.jsonl b.jsonl`."""
    from videorl.media import MediaCache, MediaError
    from videorl.media.fingerprint import memo_path, read_memo

    datasets = [*keep, *more]
    if not datasets:
        raise click.UsageError("name the datasets whose entries to keep: --keep DATA [DATA...]")
    failed: list[dict[str, Any]] = []
    samples = _load_data(datasets, media_root, failed)
    if failed:
        for f in failed:
            click.echo(f"cannot read: {f['reason']}", err=True)
        raise click.ClickException("a --keep dataset could not be read; nothing was deleted")
    cache = MediaCache(cache_dir)
    kept: set[str] = set()
    memos: set[Path] = set()
    unknown = 0
    for video in {v for s in samples for v in s.videos}:
        try:
            kept.add(cache.fingerprint(video).sha256[:32])
        except MediaError:
            memo = read_memo(cache.sources_dir, video)
            if memo is None:
                unknown += 1
                continue
            kept.add(memo.sha256[:32])
        memos.add(memo_path(cache.sources_dir, video))
    doomed = [p for p in cache.entry_paths() if p.name.split("-")[0] not in kept]
    doomed += cache.temp_files()
    doomed += [p for p in cache.sources_dir.glob("*.json") if p not in memos] if cache.sources_dir.exists() else []
    freed = sum(p.stat().st_size for p in doomed)
    if not dry_run:
        for path in doomed:
            path.unlink(missing_ok=True)
    entries = sum(1 for p in doomed if p.suffix == ".safetensors" and not p.name.startswith("."))
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {entries} entries and {len(doomed) - entries} other files ({_mb(freed)}); "
               f"kept the entries of {len(kept)} videos")
    if unknown:
        click.echo(f"warning: {unknown} videos of the --keep datasets are missing and were never cached", err=True)
