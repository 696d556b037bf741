"""``videorl cache build|verify|stats|gc``: the frame cache from the command line.

Imports of the media stack (PyAV, numpy, safetensors) happen inside the commands, so that
``videorl --help`` stays fast.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from videorl.atomic import DiskFullError, check_output, write_output_text
from videorl.data.loaders import RowError, load_samples
from videorl.errors import ConfigError, DataError, VideorlError
from videorl.plugins import Plugins

if TYPE_CHECKING:
    from videorl.data import Sample
    from videorl.media import BuildReport, DecodeParams

_DEFAULT_WORKERS = max(1, min(4, os.cpu_count() or 1))


@click.group("cache")
def cache_group() -> None:
    """Decode videos once into the frame cache; check, summarise and prune it."""


def _decode_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--factor",
            type=click.IntRange(min=1),
            default=None,
            help="Patch × merge size of the model: 28 for Qwen2/2.5-VL, 32 for Qwen3-VL/3.5 "
            "(default with --config or --model: the model's).",
        ),
        click.option(
            "--temporal-patch-size",
            type=click.IntRange(min=1),
            default=2,
            show_default=True,
            help="Frames per temporal patch of the model; the frame count is a multiple of it.",
        ),
        click.option(
            "--fps",
            type=click.FloatRange(min=0, min_open=True),
            default=2.0,
            show_default=True,
            help="Frames sampled per second of video.",
        ),
        click.option("--max-frames", type=click.IntRange(min=1), default=128, show_default=True),
        click.option("--min-frames", type=click.IntRange(min=1), default=4, show_default=True),
        click.option(
            "--min-pixels",
            type=click.IntRange(min=0),
            default=3136,
            show_default=True,
            help="Least pixels per frame.",
        ),
        click.option(
            "--max-pixels",
            type=click.IntRange(min=1),
            default=262144,
            show_default=True,
            help="Most pixels per frame.",
        ),
        click.option(
            "--total-pixels",
            type=click.IntRange(min=1),
            default=None,
            help="Most pixels of a whole clip, counted per temporal patch.",
        ),
        click.option(
            "--interpolation",
            type=click.Choice(["bicubic", "bilinear", "area", "lanczos"]),
            default="bicubic",
            show_default=True,
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _params(kwargs: dict[str, Any]) -> DecodeParams:
    from videorl.media import DecodeParams

    names = (
        "factor",
        "temporal_patch_size",
        "fps",
        "max_frames",
        "min_frames",
        "min_pixels",
        "max_pixels",
        "total_pixels",
        "interpolation",
    )
    if kwargs.get("factor") is None:
        raise click.UsageError(
            "give --factor (28 for Qwen2/2.5-VL, 32 for Qwen3-VL/3.5), or --config CONFIG / --model DIR to "
            "take the factor and the video budget from the training config or the model"
        )
    try:
        return DecodeParams(**{n: kwargs.pop(n) for n in names})
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


@dataclass
class _Settings:
    """What ``--config`` contributes besides the decoding parameters."""

    data: tuple[Path, ...] = ()
    cache_dir: Path | None = None
    media_root: Path | None = None


#: the ``cache build`` flags a training config or model backend sets, by ``DecodeParams`` field
_BUDGET_FLAGS = (
    "factor",
    "temporal_patch_size",
    "fps",
    "max_frames",
    "min_pixels",
    "max_pixels",
    "total_pixels",
)


def _build_settings(
    plugins: Plugins, config_file: Path | None, model_dir: Path | None, decode: dict[str, Any]
) -> _Settings:
    """With ``--config`` or ``--model``: the decoding parameters training would use (its backend's
    factor and the family's budget with the config's ``data.video_*`` keys) set in ``decode`` wherever
    no flag was given explicitly, and the config's datasets, cache and media root."""
    from click.core import ParameterSource

    from videorl.media import DecodeParams

    if config_file is None and model_dir is None:
        return _Settings()
    if config_file is not None and model_dir is not None:
        raise click.UsageError("give --config or --model, not both (the config names its model)")
    settings = _Settings()
    try:
        if config_file is not None:
            from videorl.config import TrainConfig, load_config
            from videorl.train.compose import make_backend

            config: TrainConfig = load_config(config_file)
            backend = make_backend(config, plugins)
            budget = config.data.visual_budget(backend.budget)
            d = config.data
            settings = _Settings(
                tuple(Path(f) for f in [*d.train_files, *d.val_files]),
                Path(d.cache_dir) if d.cache_dir else None,
                Path(d.media_root) if d.media_root else None,
            )
        else:
            from videorl.backend import backend_for_model

            backend = backend_for_model(str(model_dir), plugins.model_backends)
            budget = backend.budget
        params = DecodeParams.from_budget(
            budget, factor=backend.factor, temporal_patch_size=backend.temporal_patch_size
        )
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    ctx = click.get_current_context()
    for name in _BUDGET_FLAGS:
        if ctx.get_parameter_source(name) in (ParameterSource.DEFAULT, None):
            decode[name] = getattr(params, name)
    return settings


def _load_data(
    paths: Iterable[Path], media_root: Path | None, failures: list[dict[str, Any]]
) -> list[Sample]:
    """The samples of every DATA argument; invalid rows (``where``: their ``file:line``) and unreadable
    files become failure lines, and the valid rows of the same file are kept."""

    samples: list[Sample] = []
    for path in paths:
        errors: list[DataError] = []
        try:
            samples += load_samples(path, media_root=media_root, require_answer=False, errors=errors)
        except DataError as exc:
            errors.append(exc)
        failures += [
            {"sample": None, "where": e.where if isinstance(e, RowError) else str(path), "video": None,
             "reason": str(e), "stage": "dataset"}
            for e in errors
        ]  # fmt: skip
    return samples


def _write_report(path: Path, rows: list[dict[str, Any]]) -> str | None:
    """Write the failure report; on a full disk, the message saying so instead (nothing half-written)."""

    try:
        write_output_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    except DiskFullError as exc:
        return str(exc)
    return None


def _size(path: Path) -> int:
    """The size of ``path``, 0 when it is gone meanwhile (another gc, or a writer that finished)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _exit_on_sigterm() -> None:
    """``SIGTERM`` ends the command as an exception does (exit code 143), so that the worker pool is
    closed and its busy workers killed; a ``SIGKILL`` runs no code, so the workers also die with their
    parent by themselves (:class:`~videorl.workers.WorkerPool`)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


@cache_group.command("build")
@click.argument("data", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The cache root (created if absent; default with --config: its data.cache_dir).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A training config: its model's factor and the video budget training uses, its datasets "
    "(when no DATA is given), cache_dir and media_root. Flags given explicitly win.",
)
@click.option(
    "--model",
    "model_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A model directory: the factor and the default video budget of its family's backend.",
)
@click.option(
    "--verify",
    "verify",
    is_flag=True,
    help="Read every entry already present in full (frames and checksum) and rebuild damaged ones; "
    "without it their header and key are checked.",
)
@_decode_options
@click.option(
    "--media-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder that relative media paths are resolved against (default: each dataset's folder).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=_DEFAULT_WORKERS,
    show_default=True,
    help="Decoding processes.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Decoder threads per worker (default: CPU cores / workers).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Seconds allowed per video; a slower one is killed and reported.",
)
@click.option(
    "--failures",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Failure report (JSONL: sample, video, reason). Default: CACHE_DIR/build-failures.jsonl.",
)
@click.option("--quiet", is_flag=True, help="No progress bars.")
@click.pass_obj
def build_command(
    plugins: Plugins,
    data: tuple[Path, ...],
    cache_dir: Path | None,
    config_file: Path | None,
    model_dir: Path | None,
    verify: bool,
    media_root: Path | None,
    workers: int,
    threads: int | None,
    timeout: float,
    failures: Path | None,
    quiet: bool,
    **decode: Any,
) -> None:
    """Decode, sample and resize every video of DATA into the cache.

    DATA: datasets (JSON/JSONL, Parquet, HF dataset folders; EasyVideoR1 or Video-R1 schema), .txt
    lists of video paths, video files or folders of videos. Each distinct video is decoded once; entries
    already present are checked and kept, damaged ones rebuilt (re-running is incremental). A bad video or row
    is reported, never fatal: the failure report lists sample, where, video and reason, and the exit code is 1
    if anything failed.

    \b
    Examples:
      videorl cache build --config train.yaml              # the run's datasets, cache and budget
      videorl cache build data.jsonl --cache-dir cache/ --model Qwen2.5-VL-7B
      videorl cache build data.jsonl --cache-dir cache/ --factor 28
    """
    from videorl.media import build_cache

    _exit_on_sigterm()
    settings = _build_settings(plugins, config_file, model_dir, decode)
    data = data or settings.data
    cache_dir = cache_dir or settings.cache_dir
    media_root = media_root or settings.media_root
    if not data:
        raise click.UsageError("name the DATA to cache (or give --config, whose datasets are used)")
    if cache_dir is None:
        raise click.UsageError("give --cache-dir (or a --config whose data.cache_dir is set)")
    own_report = cache_dir / "build-failures.jsonl"
    report_path = failures or own_report
    try:  # the cache's own report is kept in it; nothing else the build reads is replaced
        check_output(report_path, inputs=data, reads=[cache_dir], allowed=[own_report], what="--failures")
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    params = _params(decode)
    failed: list[dict[str, Any]] = []
    samples = _load_data(data, media_root, failed)
    users: dict[str, list[Sample]] = {}
    for sample in samples:
        for video in sample.videos:
            users.setdefault(video, []).append(sample)
    cache_dir.mkdir(parents=True, exist_ok=True)
    report = build_cache(
        users,
        params,
        cache_dir,
        workers=workers,
        timeout=timeout,
        threads=threads,
        progress=not quiet,
        verify=verify,
    )
    for failure in report.failures:
        for sample in users.get(failure.video, []):
            failed.append(
                {
                    "sample": sample.id,
                    "where": sample.origin,
                    "video": failure.video,
                    "reason": failure.reason,
                    "stage": failure.stage,
                }
            )
    _finish_build(report, len(users), params, report_path, failed)


def _finish_build(
    report: BuildReport, videos: int, params: DecodeParams, report_path: Path, failed: list[dict[str, Any]]
) -> None:
    """Write the failure report, say what was built, and exit 1 when anything failed."""
    not_written = _write_report(report_path, failed)
    click.echo(
        f"{len(report.refs)} of {videos} videos cached in {report.seconds:.1f} s "
        f"({report.built} decoded now, {report.cached} already cached); parameters {params.to_json()}"
    )
    if not_written is not None:
        for f in failed[:20]:
            click.echo(f"failed: {f['where'] or f['video']}: {f['reason']}", err=True)
        click.echo(f"the failure report {report_path} was not written: {not_written}", err=True)
    if failed:
        rows = sum(1 for f in failed if f["stage"] == "dataset")
        where = f"report: {report_path}" if not_written is None else "listed above"
        click.echo(f"FAILED: {len(report.failures)} videos, {rows} dataset rows or files; {where}", err=True)
        raise SystemExit(1)
    if not_written is not None:
        raise SystemExit(1)


@cache_group.command("verify")
@click.argument("cache_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--delete-bad",
    is_flag=True,
    help="Delete corrupt entries and temporary files left by killed writers (never those of a writer "
    "still running; another machine's after an hour untouched).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def verify_command(cache_dir: Path, delete_bad: bool, as_json: bool, quiet: bool) -> None:
    """Read every entry in full: frames match the header's shape and checksum, key matches parameters.

    Exit code 1 when an entry is corrupt: the next `videorl cache build` of its video rebuilds it (or
    delete it with --delete-bad). Symbolic links in the cache are listed, never followed.
    """
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
            if not delete_bad:
                cache.note_broken(path, str(exc))  # so that the next build rebuilds it
    temps = cache.leftover_temp_files()
    writing = len(cache.temp_files()) - len(temps)
    links = cache.links()
    if delete_bad:
        for item in bad:
            Path(item["entry"]).unlink(missing_ok=True)
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    result = {
        "entries": len(paths),
        "ok": len(paths) - len(bad),
        "corrupt": bad,
        "temp_files": [str(t) for t in temps],
        "temp_files_being_written": writing,
        "links_not_followed": [str(p) for p in links],
        "deleted": delete_bad,
    }
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        for item in bad:
            click.echo(f"CORRUPT {item['reason']}")
        for tmp in temps:
            click.echo(f"LEFTOVER {tmp} (a writer was killed before finishing; safe to delete)")
        for link in links:
            click.echo(f"LINK {link} (a symbolic link; not followed, not checked)")
        action = "; deleted" if delete_bad and (bad or temps) else ""
        live = f" ({writing} more being written, kept)" if writing else ""
        click.echo(
            f"{len(paths) - len(bad)} of {len(paths)} entries OK, {len(bad)} corrupt, "
            f"{len(temps)} temporary files{action}{live}"
        )
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
        group = groups.setdefault(
            info.params.to_json(), {"params": info.params.to_dict(), "entries": 0, "bytes": 0, "frames": 0}
        )
        group["entries"] += 1
        group["bytes"] += size
        group["frames"] += info.metadata.num_frames
    temps = cache.temp_files()
    links = cache.links()
    summary = {
        "cache_dir": str(cache_dir),
        "entries": sum(g["entries"] for g in groups.values()) + unreadable,
        "sources": len(sources),
        "bytes": total,
        "unreadable": unreadable,
        "temp_files": len(temps),
        "links_not_followed": len(links),
        "by_params": sorted(groups.values(), key=lambda g: -g["bytes"]),
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(
        f"{cache_dir}: {summary['entries']} entries of {len(sources)} videos, {_mb(total)}"
        + (f", {unreadable} unreadable" if unreadable else "")
        + (f", {len(temps)} temporary files" if temps else "")
        + (f", {len(links)} symbolic links (not followed)" if links else "")
    )
    for g in summary["by_params"]:
        p = g["params"]
        budget = f"fps {p['fps']:g}, ≤{p['max_frames']} frames, {p['min_pixels']}–{p['max_pixels']} px/frame"
        budget += f", total {p['total_pixels']}" if p["total_pixels"] else ""
        click.echo(
            f"  {g['entries']:>7} entries  {_mb(g['bytes']):>12}  {g['frames']:>9} frames  "
            f"factor {p['factor']}, tps {p['temporal_patch_size']}, {budget}, {p['interpolation']}"
        )


@cache_group.command("gc")
@click.argument("cache_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("more", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--keep",
    "keep",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A dataset (or video list, video, folder) whose videos' entries are kept; repeatable.",
)
@click.option(
    "--media-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder that relative media paths are resolved against.",
)
@click.option("--dry-run", is_flag=True, help="Only print what would be deleted.")
def gc_command(
    cache_dir: Path, more: tuple[Path, ...], keep: tuple[Path, ...], media_root: Path | None, dry_run: bool
) -> None:
    """Delete entries of videos that none of the --keep datasets refers to (any parameters), and
    temporary files left by killed writers (never those of a writer still running, so gc is safe while
    training or a build uses the cache; another machine's after an hour untouched). `videorl cache gc
    DIR --keep a.jsonl b.jsonl`. Symbolic links in the cache are never followed (nothing outside the
    cache is deleted)."""
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
    doomed += [p for p in cache.broken_notes() if p.name.split("-")[0] not in kept]
    doomed += cache.leftover_temp_files()  # never those of a writer still running
    doomed += [p for p in cache.source_memos() if p not in memos]
    freed = sum(_size(p) for p in doomed)
    if not dry_run:
        for path in doomed:
            path.unlink(missing_ok=True)
    entries = sum(1 for p in doomed if p.suffix == ".safetensors" and not p.name.startswith("."))
    verb = "would delete" if dry_run else "deleted"
    click.echo(
        f"{verb} {entries} entries and {len(doomed) - entries} other files ({_mb(freed)}); "
        f"kept the entries of {len(kept)} videos"
    )
    if unknown:
        click.echo(
            f"warning: {unknown} videos of the --keep datasets are missing and were never cached", err=True
        )
    links = cache.links()
    if links:
        click.echo(
            f"note: {len(links)} symbolic links in the cache were not followed (e.g. {links[0]})", err=True
        )
