"""The pipelined evaluator against a plain sequential loop, side by side on the same samples and settings.

Prints one JSON line. The benchmark is synthetic MVBench (official layout, ``object_existence`` rows,
one question per video) over ``--videos`` H.264 clips written with PyAV (textured frames with a
moving square, 320×240, 30 fps, 6 s); the model is a tiny random Qwen2.5-VL built offline; engine HF
``generate``, greedy, fp32, on CPU. Settings: fps 2, max_frames 16, max_pixels 50176, 16 new tokens.
torch runs one intra-op thread on both sides by default (``--threads``): on a shared machine, OpenMP
barriers across busy cores make many small operations (batch-1 decoding) erratically slow, which
would flatter the batched side.

- ``sequential_s``: one sample at a time — decode the video (no cache), build the prompt, encode,
  generate (a batch of one), score, append the prediction;
- ``pipelined_s``: :class:`videorl.eval.pipeline.Evaluator` on a cold frame cache (built on first use,
  so decoding is included), ``--workers`` loader threads, batches of up to ``--batch-size`` (the engine
  waits up to ``--batch-wait`` seconds for a fuller batch, the evaluator's default);
- ``ratio`` = sequential / pipelined (target >= 2); ``ratio_warm``: the same with the cache already
  built (a second evaluation of the benchmark, e.g. another checkpoint);
- ``same_predictions``: every response of the three runs is identical (asserted);
- each side runs ``--repeats`` times, alternated (fresh caches), and the best time of each is kept;
- ``sequential_stages`` / ``pipelined_stages``: where the time goes (for the pipeline, load, encode and
  score add up per-sample times across overlapping threads; ``engine_s`` is time in ``generate``).

Usage: ``python benchmarks/eval_pipeline.py [--videos 64] [--workers 2] [--batch-size 8] [--repeats 2]
[--threads 1] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from videorl.eval.pipeline import BATCH_WAIT_S

FAMILY = "qwen2_5_vl"
VIDEO = {"fps": 2.0, "max_frames": 16, "max_pixels": 50176}
MAX_TOKENS = 16
CANDIDATES = ["red", "green", "blue", "yellow"]
QUESTIONS = (
    "What colour is the square in clip {}?",
    "Which direction does the object move in clip {}?",
    "How many objects are in the video {}?",
    "The video shows a square {} times: which colour is it?",
)


def write_benchmark(root: Path, videos: int) -> None:
    from videorl.media.synthetic import textured_frames, write_video

    folder = root / "video" / "clevrer" / "video_validation"
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(videos):
        write_video(folder / f"clip-{i}.mp4", textured_frames(180, 240, 320, seed=i), fps=30.0)
        rows.append(
            {
                "video": f"clip-{i}.mp4",
                "question": QUESTIONS[i % len(QUESTIONS)].format(i),
                "candidates": CANDIDATES,
                "answer": CANDIDATES[i % len(CANDIDATES)],
            }
        )
    (root / "json").mkdir(parents=True, exist_ok=True)
    (root / "json" / "object_existence.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")


def sequential(
    task: Any, inputs: Any, engine: Any, sampling: Any, out: Path
) -> tuple[float, dict[str, float]]:
    """Decode, encode, generate, score and save, one sample at a time."""
    from videorl.eval import Prediction, append_prediction, predictions_path, score_row

    stages = {"decode_s": 0.0, "encode_s": 0.0, "generate_s": 0.0, "score_s": 0.0}
    tokenizer = inputs.backend.processor.tokenizer
    path = predictions_path(out, task.name)
    start = time.perf_counter()
    for row in task.rows:
        t0 = time.perf_counter()
        prompt = inputs.prompt(task.benchmark, row)
        t1 = time.perf_counter()
        encoded = inputs.backend.encode(prompt)
        t2 = time.perf_counter()
        completion = engine.generate([encoded], sampling)[0][0]
        t3 = time.perf_counter()
        response = tokenizer.decode(completion.token_ids, skip_special_tokens=True)
        result = score_row(task.benchmark, row, Prediction(row.id, response))
        append_prediction(
            path, {"id": row.id, "response": response, "prediction": result.prediction, "score": result.score}
        )
        t4 = time.perf_counter()
        for key, value in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            stages[key] += value
    return time.perf_counter() - start, {k: round(v, 3) for k, v in stages.items()}


def responses(out: Path, name: str) -> dict[str, str | None]:
    from videorl.eval import predictions_path, read_predictions

    return {i: p.response for i, p in read_predictions(predictions_path(out, name)).items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--videos", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument(
        "--batch-wait",
        type=float,
        default=BATCH_WAIT_S,
        help="Seconds the engine may wait for a fuller batch (the evaluator's default).",
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="Alternated runs of each side; the best is kept."
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads, both sides (0: torch's default, one per core).",
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="Keep files here (default: a temporary folder)."
    )
    args = parser.parse_args()

    import torch

    from videorl.backend import backend_for_model
    from videorl.eval.inputs import RowInputs
    from videorl.eval.pipeline import Evaluator, load_task
    from videorl.media import DecodeParams, ImageParams, MediaCache
    from videorl.plugins import load_plugins
    from videorl.rollout import SamplingParams
    from videorl.rollout.hf import HFEngine
    from videorl_models.tiny import build_tiny

    if args.threads:
        torch.set_num_threads(args.threads)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="videorl-eval-bench-"))
    try:
        plugins = load_plugins()
        model_dir = build_tiny(FAMILY, work / "model", seed=0)
        root = work / "mvbench"
        write_benchmark(root, args.videos)
        task = load_task(plugins.benchmarks, "mvbench", root)
        backend = backend_for_model(model_dir, plugins.model_backends)
        video = DecodeParams.from_budget(
            backend.budget, factor=backend.factor, temporal_patch_size=backend.temporal_patch_size, **VIDEO
        )
        image = ImageParams.from_budget(backend.budget, factor=backend.factor)
        engine = HFEngine(backend, backend.load_model(dtype=torch.float32))
        sampling = SamplingParams(n=1, temperature=0.0, max_tokens=MAX_TOKENS, seed=0)

        def inputs(cache: MediaCache) -> RowInputs:
            return RowInputs(backend, cache, video, image)

        warm = inputs(
            MediaCache(None, "realtime_only")
        )  # one untimed sample warms up torch and the processor
        engine.generate([backend.encode(warm.prompt(task.benchmark, task.rows[0]))], sampling)

        runs: list[dict[str, Any]] = []
        for r in range(args.repeats):  # alternated, fresh cache each time; the best of each side is kept
            seq_s, seq_stages = sequential(task, warm, engine, sampling, work / f"sequential-{r}")
            cache = MediaCache(
                work / f"cache-{r}", strict_params=False, threads=1
            )  # loaders decode in parallel
            evaluator = Evaluator(
                inputs(cache),
                engine,
                sampling,
                workers=args.workers,
                batch_size=args.batch_size,
                batch_wait=args.batch_wait,
            )
            cold = evaluator.run([task], work / f"pipelined-{r}")
            hot = evaluator.run([task], work / f"pipelined-warm-{r}")
            expected = responses(work / f"sequential-{r}", task.name)
            same = (
                expected
                == responses(work / f"pipelined-{r}", task.name)
                == responses(work / f"pipelined-warm-{r}", task.name)
            )
            assert len(expected) == args.videos and same, (
                "the pipelined evaluator's predictions differ from the loop's"
            )
            runs.append(
                {"seq": (seq_s, seq_stages), "cold": cold.times, "hot": hot.times, "responses": expected}
            )
        assert all(run["responses"] == runs[0]["responses"] for run in runs)
        seq_s, seq_stages = min((run["seq"] for run in runs), key=lambda x: x[0])
        cold_t = min((run["cold"] for run in runs), key=lambda t: t.wall_s)
        hot_t = min((run["hot"] for run in runs), key=lambda t: t.wall_s)
        result = {
            "benchmark": "eval_pipeline",
            "samples": args.videos,
            "ratio": round(seq_s / cold_t.wall_s, 2),
            "ratio_warm": round(seq_s / hot_t.wall_s, 2),
            "target": 2.0,
            "sequential_s": round(seq_s, 2),
            "pipelined_s": round(cold_t.wall_s, 2),
            "pipelined_warm_s": round(hot_t.wall_s, 2),
            "same_predictions": True,  # asserted above
            "sequential_stages": seq_stages,
            "pipelined_stages": cold_t.as_dict(),
            "pipelined_warm_stages": hot_t.as_dict(),
            "settings": {
                "model": f"tiny {FAMILY}",
                "engine": "hf fp32 greedy",
                "max_tokens": MAX_TOKENS,
                **VIDEO,
                "video": "320x240 30 fps 6 s H.264",
                "workers": args.workers,
                "batch_size": args.batch_size,
                "batch_wait_s": args.batch_wait,
                "cpus": os.cpu_count(),
                "torch_threads": torch.get_num_threads(),
                "repeats": args.repeats,
                "load_average": round(os.getloadavg()[0], 2),
            },
        }
        print(json.dumps(result))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
