"""``videorl reward``: score responses from a JSONL file with the installed rewards.

Each input line is a sample with one or more responses: the sample's fields (``problem_type``, the
ground truth in ``ground_truth``/``answer``/``solution``, ``options``, ``media`` or ``video_metadata``,
``id``, ...) either at the top level or under ``"sample"``, and ``"response": str`` or
``"responses": [str, ...]``. Each output line is the input row plus ``scores`` (one per response,
``null`` when the rewards abstained), ``parts`` (one mapping per response) and, when a reward failed,
``errors``. Bad rows are reported with their line numbers and left out; the output is written
atomically.
"""

from __future__ import annotations

import json
import math
import pickle
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import IO, Any

import click

from videorl.errors import ConfigError, DataError
from videorl.plugins import Plugins
from videorl.registry import Registry
from videorl.rewards.config import RewardConfig
from videorl.rewards.router import RewardRouter
from videorl.rewards.types import RewardInput, RewardOutput

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
    """The row on line ``line_no``, or a message saying why it is bad."""
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
    try:
        inputs = [RewardInput.from_sample(sample, r, model_family=model_family) for r in responses]
    except KeyError as exc:
        return f"missing field {exc.args[0]}"
    except (TypeError, ValueError) as exc:
        return f"invalid field: {exc}"
    for inp in inputs:
        if not inp.sample_id:
            inp.sample_id = f"line {line_no}"
    return Row(line_no, data, inputs)


# --- scoring, in this process or in worker processes ---------------------------------------------

_worker_router: RewardRouter | None = None


def _rebuild_router(specs: Sequence[RewardSpec], config: RewardConfig) -> RewardRouter:
    registry: Registry[Any] = Registry("reward")
    for name, target, origin, aliases in specs:
        registry.register(name, target, origin=origin, aliases=aliases)
    return RewardRouter.from_registry(registry, config)


def _init_worker(specs: Sequence[RewardSpec], config: RewardConfig) -> None:
    global _worker_router
    _worker_router = _rebuild_router(specs, config)


def _pack(out: RewardOutput | None) -> Scored:
    if out is None:
        return None, {}, None
    return out.score, dict(out.parts), out.error


def _score_in_worker(inputs: list[RewardInput]) -> list[Scored]:
    assert _worker_router is not None, "worker process not initialised"
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
    context = get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_init_worker, initargs=(specs, router.config)
    ) as pool:
        futures = [
            pool.submit(_score_in_worker, [inp for row in chunk for inp in row.inputs]) for chunk in chunks
        ]
        for chunk, future in zip(chunks, futures, strict=True):
            try:
                scored = future.result()
            except Exception as exc:  # rewards never raise through the router: this is the pool itself
                raise click.ClickException(
                    f"a worker process failed ({type(exc).__name__}: {exc}); a reward registered as an "
                    "object defined outside an importable module cannot run in workers: use --workers 1"
                ) from exc
            yield from _split(chunk, scored)


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
        import yaml

        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read reward config {path}: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(loaded).__name__}")
        loaded = loaded or {}
        data = dict(loaded.get("rewards", loaded))
    if timeout is not None:
        data["timeout"] = timeout
    try:
        return RewardConfig.from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path or 'reward config'}: {exc}") from exc


def _read_rows(path: Path, router: RewardRouter, model_family: str | None) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    bad: list[str] = []
    with path.open(encoding="utf-8") as f:
        for line_no, text in enumerate(f, 1):
            if not text.strip():
                continue
            parsed = parse_row(line_no, text, router, model_family)
            if isinstance(parsed, str):
                bad.append(f"{path}:{line_no}: {parsed}")
            else:
                rows.append(parsed)
    return rows, bad


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
    """Score responses with the installed rewards (debugging rewards, scripting, tests)."""
    from videorl.atomic import atomic_write

    try:
        config = load_reward_config(config_path, timeout)
        router = RewardRouter.from_registry(plugins.rewards, config)
        specs = reward_specs(plugins.rewards) if workers > 1 else []
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if not router.names:
        raise click.ClickException(
            "no rewards are installed: `pip install ./plugins/rewards` installs the library"
        )
    started = time.monotonic()
    rows, bad = _read_rows(input_path, router, model_family)
    for message in bad[:MAX_REPORTED]:
        click.echo(f"bad row: {message}", err=True)
    if len(bad) > MAX_REPORTED:
        click.echo(f"... and {len(bad) - MAX_REPORTED} more bad rows", err=True)
    try:
        router.validate(inp for row in rows for inp in row.inputs)
    except (ConfigError, DataError) as exc:
        raise click.ClickException(str(exc)) from exc
    by_type: dict[str, list[float]] = {}
    failures: Counter[str] = Counter()

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as f:
            _write_rows(f, rows, router, specs, workers, by_type, failures)

    atomic_write(output_path, write)
    responses = sum(len(row.inputs) for row in rows)
    elapsed = time.monotonic() - started
    click.echo(
        f"scored {responses} response(s) in {len(rows)} row(s) in {elapsed:.1f} s -> {output_path}"
        + (f"; {len(bad)} bad row(s) left out" if bad else ""),
        err=True,
    )
    for problem_type, scores in sorted(by_type.items()):
        mean = sum(scores) / len(scores) if scores else math.nan
        click.echo(f"  {problem_type}: {len(scores)} scored, mean {mean:.4f}", err=True)
    if failures:
        detail = ", ".join(f"{kind} {n}" for kind, n in sorted(failures.items()))
        click.echo(f"  reward failures (scored 0): {detail}", err=True)
    if bad:
        sys.exit(1)


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
            scores = by_type.setdefault(inp.problem_type, [])
            if score is not None:
                scores.append(score)
            if error:
                failures[error.split(":", 1)[0]] += 1
