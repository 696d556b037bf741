"""``videorl reward``: score responses from a JSONL file with the installed rewards.

Each input line is a sample with one or more responses: the sample's fields (``problem_type``, the
ground truth in ``ground_truth``/``answer``/``solution``, ``options``, ``media`` or ``video_metadata``,
``id``, ...) either at the top level or under ``"sample"``, and ``"response": str`` or
``"responses": [str, ...]``. Each output line is the input row plus ``scores`` (one per response,
``null`` when the rewards abstained), ``parts`` (one mapping per response) and, when a reward failed,
``errors``. Bad rows (invalid JSON or UTF-8, nested too deeply, missing fields, or of a problem type
whose reward plugin cannot be loaded) are reported with their line numbers and left out; the other rows
are scored. The output is written atomically and may not be the input file (or a link to it).
"""

from __future__ import annotations

import json
import math
import pickle
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import click

from videorl.atomic import check_output, write_output
from videorl.config import load_rewards
from videorl.errors import ConfigError, DataError, RegistryError, VideorlError
from videorl.plugins import Plugins
from videorl.registry import Registry
from videorl.rewards.config import RewardConfig
from videorl.rewards.router import RewardRouter
from videorl.rewards.types import RewardInput, RewardOutput
from videorl.workers import WorkerPool

#: rows scored per batch (and per task handed to a worker process)
CHUNK_ROWS = 256
#: at most this many bad rows are listed one by one
MAX_REPORTED = 20

#: (name, target, origin, aliases) of a registered reward: what a worker process needs to rebuild it
RewardSpec = tuple[str, Any, str, tuple[str, ...]]
#: (score, parts, error) of one response
Scored = tuple[float | None, dict[str, float], str | None]


@dataclass
class Row:
    """A parsed input line: the raw object and one reward input per response."""

    line: int
    data: dict[str, Any]
    inputs: list[RewardInput]


def parse_row(line_no: int, text: str, router: RewardRouter, model_family: str | None) -> Row | str:
    """The row on line ``line_no``, or a message saying why it is bad.

    The sample is read by the training loader's row parser (through ``RewardInput.from_sample``), so a
    row gets the same id, ground truth and options here as in ``videorl train``.
    """
    try:
        return _parse_row(line_no, text, router, model_family)
    except RecursionError:
        return (
            "nested too deeply to read (JSON arrays or objects within each other beyond Python's recursion "
            "limit)"
        )


def _parse_row(line_no: int, text: str, router: RewardRouter, model_family: str | None) -> Row | str:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    sample = data.get("sample", data)
    if not isinstance(sample, dict):
        return "'sample' must be a JSON object"
    if "responses" in data:
        responses = data["responses"]
        if not isinstance(responses, list) or not responses:
            return "'responses' must be a non-empty list of strings"
    elif "response" in data:
        responses = [data["response"]]
    else:
        return "no 'response' or 'responses'"
    if not all(isinstance(r, str) for r in responses):
        return "every response must be a string"
    problem_type = sample.get("problem_type")
    if isinstance(problem_type, str) and problem_type and router.route(problem_type) is None:
        return f"problem_type {problem_type!r} has no reward (registered: {', '.join(router.names)})"
    where = f"line {line_no}"
    try:
        first = RewardInput.from_sample(sample, responses[0], model_family=model_family, where=where)
    except KeyError as exc:
        return f"missing field {exc.args[0]}"
    except DataError as exc:
        return str(exc).removeprefix(f"{where}: ")
    except (TypeError, ValueError) as exc:
        return f"invalid field: {exc}"
    first.sample_id = first.sample_id or f"line {line_no}"
    return Row(line_no, data, [first, *(replace(first, response=r) for r in responses[1:])])


# --- scoring, in this process or in worker processes ---------------------------------------------

#: the router of this worker process, rebuilt by its first task
_worker_router: RewardRouter | None = None


def _rebuild_router(specs: Sequence[RewardSpec], config: RewardConfig) -> RewardRouter:
    registry: Registry[Any] = Registry("reward")
    for name, target, origin, aliases in specs:  # collisions rebuilt as they were: failing on use
        registry.registrar(origin)(name, target, aliases=aliases)
    return RewardRouter.from_registry(registry, config)


def _pack(out: RewardOutput | None) -> Scored:
    if out is None:
        return None, {}, None
    return out.score, dict(out.parts), out.error


def _score_in_worker(
    specs: Sequence[RewardSpec], config: RewardConfig, inputs: list[RewardInput]
) -> list[Scored]:
    global _worker_router
    if _worker_router is None:
        _worker_router = _rebuild_router(specs, config)
    return [_pack(out) for out in _worker_router.score(inputs)]


def reward_specs(registry: Registry[Any]) -> list[RewardSpec]:
    """What worker processes need to rebuild the reward registry; a target that cannot be sent to
    another process is a ``ConfigError`` naming it."""
    specs = [(e.name, e.target, e.origin, e.aliases) for e in registry.entries()]
    for name, target, origin, _ in specs:
        try:
            pickle.dumps(target)
        except Exception as exc:
            raise ConfigError(
                f"reward {name!r} from {origin!r} is registered as an object that cannot be sent to "
                f"worker processes ({type(exc).__name__}); register it as a 'module:attr' string or "
                "use --workers 1"
            ) from exc
    return specs


def score_rows(
    rows: Sequence[Row], router: RewardRouter, specs: Sequence[RewardSpec], workers: int
) -> Iterator[tuple[Row, list[Scored]]]:
    """Each row with the scores of its responses, in input order."""
    chunks = [list(rows[i : i + CHUNK_ROWS]) for i in range(0, len(rows), CHUNK_ROWS)]
    if workers <= 1:
        for chunk in chunks:
            outs = router.score([inp for row in chunk for inp in row.inputs])
            yield from _split(chunk, [_pack(o) for o in outs])
        return
    # the router keeps its own time limits: the pool's deadline is not needed, its crash handling is
    tasks = [(specs, router.config, [inp for row in chunk for inp in row.inputs]) for chunk in chunks]
    done: dict[int, list[Scored]] = {}
    emitted = 0
    with WorkerPool(min(workers, len(chunks))) as pool:
        for result in pool.run(_score_in_worker, tasks, timeout=None):
            if result.stage == "crash":
                raise click.ClickException(
                    "a worker process died while scoring (killed by a signal, or out of memory); nothing "
                    "was written. Run again with --workers 1 to see which row it was"
                )
            if not result.ok:  # rewards never raise through the router: this is the pool itself
                raise click.ClickException(
                    f"a worker process failed ({result.value}); a reward registered as an object defined "
                    "outside an importable module cannot run in workers: use --workers 1"
                )
            done[result.index] = result.value
            while emitted in done:  # in input order
                yield from _split(chunks[emitted], done.pop(emitted))
                emitted += 1


def _split(chunk: list[Row], scored: list[Scored]) -> Iterator[tuple[Row, list[Scored]]]:
    i = 0
    for row in chunk:
        yield row, scored[i : i + len(row.inputs)]
        i += len(row.inputs)


def _output_row(row: Row, scored: list[Scored]) -> dict[str, Any]:
    out = dict(row.data)
    out["scores"] = [s for s, _, _ in scored]
    out["parts"] = [p for _, p, _ in scored]
    if any(e for _, _, e in scored):
        out["errors"] = [e for _, _, e in scored]
    return out


def load_reward_config(path: Path | None, timeout: float | None) -> RewardConfig:
    """The ``rewards`` section of a YAML/JSON file (or the whole file when it has none)."""
    data: dict[str, Any] = {}
    if path is not None:
        from videorl.config import parse_yaml  # the training config's reader: line numbers, duplicate keys

        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read reward config {path}: {exc}") from exc
        loaded, _, duplicates = parse_yaml(text, str(path))
        if duplicates:
            raise ConfigError("\n  ".join([f"invalid reward config {path}:", *duplicates]))
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(loaded).__name__}")
        loaded = loaded or {}
        data = dict(loaded.get("rewards", loaded))
    if timeout is not None:
        data["timeout"] = timeout
    try:
        return load_rewards(data)
    except ConfigError as exc:
        raise ConfigError(f"{path or 'reward config'}: {exc}") from exc


def _read_rows(
    path: Path, router: RewardRouter, model_family: str | None
) -> tuple[list[Row], list[tuple[int, str]]]:
    """The good rows and ``(line, message)`` of the bad ones."""
    rows: list[Row] = []
    bad: list[tuple[int, str]] = []
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                kind = "a binary file?" if b"\0" in raw else "save the file as UTF-8"
                bad.append(
                    (
                        line_no,
                        f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}; {kind})",
                    )
                )
                continue
            if line_no == 1:
                text = text.removeprefix("\ufeff")  # the byte-order mark some editors write
            if not text.strip():
                continue
            parsed = parse_row(line_no, text, router, model_family)
            if isinstance(parsed, str):
                bad.append((line_no, parsed))
            else:
                rows.append(parsed)
    return rows, bad


def _unusable_rewards(rows: Sequence[Row], router: RewardRouter, registry: Registry[Any]) -> dict[str, str]:
    """The rewards the rows need that cannot be created because of their plugin (an import that fails, a
    name two plugins registered): reward name -> message. A bad option is a ``ConfigError`` and raised."""
    needed = sorted({name for row in rows for name in _reward_names(row, router)})
    broken: dict[str, str] = {}
    for name in needed:
        try:
            router.reward(name)
        except ConfigError:
            raise
        except RegistryError as exc:
            broken[name] = str(exc)
        except Exception as exc:  # the plugin's own factory failed
            origin = next((e.origin for e in registry.entries() if e.name == name), "unknown")
            broken[name] = f"reward {name!r} from {origin!r} failed to start ({type(exc).__name__}: {exc})"
    return broken


def _settings_text(settings: dict[str, Any]) -> str:
    """``0.9·accuracy + 0.1·format, fallback on`` (the parts a reward has)."""
    parts = []
    if "accuracy_weight" in settings and "format_weight" in settings:
        parts.append(f"{settings['accuracy_weight']:g}·accuracy + {settings['format_weight']:g}·format")
    if "fallback" in settings:
        parts.append(f"fallback {'on' if settings['fallback'] else 'off'}")
    return ", ".join(parts)


def _weights_text(router: RewardRouter, problem_type: str) -> str:
    """How a (canonical) problem type was scored, for the summary: `` (1·accuracy + 0·format, fallback
    off)``, or each reward of a route with its weight and settings."""
    routes = router.route(problem_type) or []
    shown = []
    for name, weight in routes:
        settings = _settings_text(router.settings(name))
        if len(routes) == 1 and weight == 1.0:
            shown.append(f"{name}: {settings}" if settings and name != problem_type else settings)
        else:
            shown.append(f"{weight:g}·{name}" + (f" [{settings}]" if settings else ""))
    text = " + ".join(s for s in shown if s)
    return f" ({text})" if text else ""


def _reward_names(row: Row, router: RewardRouter) -> list[str]:
    return [name for inp in row.inputs for name, _ in router.route(inp.problem_type) or []]


@click.command("reward")
@click.option(
    "--input",
    "input_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSONL: one sample with 'response' or 'responses' per line.",
)
@click.option(
    "--output",
    "output_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSONL written atomically: each row plus 'scores', 'parts' (and 'errors').",
)
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1), help="Worker processes.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML/JSON whose 'rewards' section (or whole content) sets weights, format, routes, options.",
)
@click.option(
    "--model-family", default=None, help="Model family of the responses (box conventions), e.g. qwen3_vl."
)
@click.option("--timeout", type=float, default=None, help="Seconds one reward call may take (default 30).")
@click.pass_obj
def reward_command(
    plugins: Plugins,
    input_path: Path,
    output_path: Path,
    workers: int,
    config_path: Path | None,
    model_family: str | None,
    timeout: float | None,
) -> None:
    """Score responses with the installed rewards (debugging rewards, scripting, tests).

    Each reward scores with its own defaults (a TaskReward's: 0.9·accuracy + 0.1·format, fallback on;
    a plugin may declare others) unless --config sets rewards.accuracy_weight, format_weight or
    fallback, or rewards.options.NAME. The summary on stderr prints, per problem type (its canonical
    name), the weights and fallback each reward used.
    """

    try:
        check_output(output_path, inputs=[input_path, config_path], what="--output")
        config = load_reward_config(config_path, timeout)
        router = RewardRouter.from_registry(plugins.rewards, config)
        specs = reward_specs(plugins.rewards) if workers > 1 else []
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from exc
    if not router.names:
        raise click.ClickException(
            "no rewards are installed: `pip install ./plugins/rewards` installs the library"
        )
    started = time.monotonic()
    try:
        rows, bad = _read_rows(input_path, router, model_family)
    except OSError as exc:
        raise click.ClickException(f"cannot read --input {input_path}: {exc.strerror or exc}") from exc
    try:
        broken = _unusable_rewards(rows, router, plugins.rewards)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if broken:
        for message in broken.values():
            click.echo(f"unusable reward: {message}", err=True)
        kept = []
        for row in rows:
            names = [n for n in _reward_names(row, router) if n in broken]
            if names:
                bad.append((row.line, f"its reward {names[0]!r} cannot be used (see above)"))
            else:
                kept.append(row)
        rows = kept
        bad.sort()
    for line_no, message in bad[:MAX_REPORTED]:
        click.echo(f"bad row: {input_path}:{line_no}: {message}", err=True)
    if len(bad) > MAX_REPORTED:
        click.echo(f"... and {len(bad) - MAX_REPORTED} more bad rows", err=True)
    by_type: dict[str, list[float]] = {}
    failures: Counter[str] = Counter()

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as f:
            _write_rows(f, rows, router, specs, workers, by_type, failures)

    try:
        write_output(output_path, write)
    except VideorlError as exc:  # a full disk: the message names the folder; nothing was left behind
        raise click.ClickException(str(exc)) from exc
    _print_summary(rows, bad, output_path, time.monotonic() - started, router, by_type, failures)
    if bad:
        sys.exit(1)


def _print_summary(
    rows: Sequence[Row],
    bad: Sequence[tuple[int, str]],
    output_path: Path,
    elapsed: float,
    router: RewardRouter,
    by_type: dict[str, list[float]],
    failures: Counter[str],
) -> None:
    """The stderr summary: counts, and per canonical problem type its mean and how it was scored."""
    responses = sum(len(row.inputs) for row in rows)
    click.echo(
        f"scored {responses} response(s) in {len(rows)} row(s) in {elapsed:.1f} s -> {output_path}"
        + (f"; {len(bad)} bad row(s) left out" if bad else ""),
        err=True,
    )
    for problem_type, scores in sorted(by_type.items()):
        mean = sum(scores) / len(scores) if scores else math.nan
        click.echo(
            f"  {problem_type}: {len(scores)} scored, mean {mean:.4f}{_weights_text(router, problem_type)}",
            err=True,
        )
    if failures:
        detail = ", ".join(f"{kind} {n}" for kind, n in sorted(failures.items()))
        click.echo(f"  reward failures (scored 0): {detail}", err=True)


def _write_rows(
    f: IO[str],
    rows: list[Row],
    router: RewardRouter,
    specs: Sequence[RewardSpec],
    workers: int,
    by_type: dict[str, list[float]],
    failures: Counter[str],
) -> None:
    for row, scored in score_rows(rows, router, specs, workers):
        f.write(json.dumps(_output_row(row, scored), ensure_ascii=False) + "\n")
        for inp, (score, _, error) in zip(row.inputs, scored, strict=True):
            scores = by_type.setdefault(router.canonical_type(inp.problem_type), [])
            if score is not None:
                scores.append(score)
            if error:
                failures[error.split(":", 1)[0]] += 1
