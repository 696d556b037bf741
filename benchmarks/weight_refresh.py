"""vLLM weight refresh: the model folder in /dev/shm against the in-memory buckets, side by side.

For each model size and each way vLLM runs (its engine in processes of its own, the default; or in
this process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``), one fresh ``VLLMEngine`` (a subprocess of its
own: a fresh vLLM, clean memory accounting) is refreshed from another model's weights in the
engine's dtype, as training does each step, alternately through the model folder and in memory
(``rollout.weight_sync`` folder and memory), ``--repeats`` times each. Printed per row: the median
refresh time, the peak extra host memory during a refresh (over this process and the engine's:
anonymous and file-backed proportional set size from ``/proc/PID/smaps_rollup``, plus the files of
the refresh folder; the weights the trainer holds before the refresh are the baseline; measured in
refreshes of their own, not the timed ones), and folder / memory ratios. Last, one JSON line with
every figure.

Usage: ``python benchmarks/weight_refresh.py [--widths 64,1024] [--dtype bfloat16] [--bucket-mb 16]
[--repeats 5] [--modes mp,inproc]``. Tiny Qwen2.5-VL models: text hidden ``width``, 2 layers (64: 0.2 M
parameters; 1024: 32 M, 61 MB in bf16; 2048: 125 M, 238 MB). Figures: docs/multi-node.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# One run, in a subprocess: ``python weight_refresh.py --child BASE OTHER DTYPE BUCKET_MB REPEATS OUT``.
CHILD = "--child"


def _smaps_kib(pid: int) -> int:
    """Anonymous and file-backed proportional set size of ``pid`` (tmpfs pages excluded: the refresh
    folder is counted once, by its files)."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Pss_Anon:", "Pss_File:")):
                    total += int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0
    return total


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the engine core and its worker)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return [pid, *(c.pid for c in proc.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def _folder_bytes(root: Path | None) -> int:
    if root is None or not root.exists():
        return 0
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


class _Sampler:
    """The peak of host memory (bytes) while it runs, sampled every few milliseconds in a thread."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.peak, self._stop = engine, 0, threading.Event()
        self.pids = _tree(os.getpid())

    def sample(self) -> int:
        kib = sum(_smaps_kib(pid) for pid in self.pids)
        return kib * 1024 + _folder_bytes(self.engine._weights.root)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.sample())
            time.sleep(0.002)

    def __enter__(self) -> _Sampler:
        self.start = self.peak = self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.sample())


def child(base: str, other: str, dtype: str, bucket_mb: int, repeats: int) -> dict[str, Any]:
    """One engine, refreshed alternately through the folder and in memory (alternating keeps the
    shared machine's load, which drifts over minutes, out of the ratio)."""
    import gc

    import torch

    from videorl.backend import backend_for_model
    from videorl.plugins import load_plugins
    from videorl.rollout.vllm import VLLMEngine

    registry = load_plugins().model_backends
    backend = backend_for_model(base, registry)
    engine = VLLMEngine(backend, base, dtype=dtype, max_model_len=512, weight_bucket_mb=bucket_mb)
    syncs = ("folder", "memory")
    seconds: dict[str, list[float]] = {s: [] for s in syncs}
    extra: dict[str, list[int]] = {s: [] for s in syncs}
    try:
        weights = [
            {k: v.to(getattr(torch, dtype))
             for k, v in backend_for_model(path, registry).load_model().state_dict().items()}
            for path in (other, base)
        ]  # fmt: skip
        for sync in syncs:  # warm-up: vLLM's one-time set-ups of each path
            engine.weight_sync = sync
            engine.update_weights(weights[1])
        for i in range(2 * repeats):
            engine.weight_sync = sync = syncs[i % 2]
            engine._weights.close()  # the folder is written within the refresh it belongs to
            gc.collect()
            start = time.perf_counter()  # timed without the sampler, whose thread slows the refresh
            engine.update_weights(weights[i // 2 % 2])
            seconds[sync].append(time.perf_counter() - start)
        for i in range(2 * repeats):
            engine.weight_sync = sync = syncs[i % 2]
            engine._weights.close()
            gc.collect()
            with _Sampler(engine) as sampler:
                engine.update_weights(weights[i // 2 % 2])
            extra[sync].append(sampler.peak - sampler.start)
        state_bytes = sum(t.numel() * t.element_size() for t in weights[0].values())
        transport = engine._memory.transport
    finally:
        engine.close()
    return {
        sync: {
            "seconds": statistics.median(seconds[sync]),
            "extra_mb": round(max(extra[sync]) / 2**20, 1),
            "state_mb": round(state_bytes / 2**20, 1),
            "transport": transport if sync == "memory" else "folder",
        }
        for sync in syncs
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--widths", default="64,1024", help="text hidden sizes of the tiny models")
    parser.add_argument("--dtype", default="bfloat16", help="the engine's dtype (the refreshed weights')")
    parser.add_argument(
        "--bucket-mb", type=int, default=16, help="rollout.weight_bucket_mb of the memory runs"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modes", default="mp,inproc", help="mp: engine processes; inproc: this process")
    args = parser.parse_args()

    from videorl_models.tiny import build_tiny

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="videorl-weight-refresh-") as tmp:
        for width in (int(w) for w in args.widths.split(",")):
            base = build_tiny("qwen2_5_vl", Path(tmp) / f"base-{width}", seed=0, width=width)
            other = build_tiny("qwen2_5_vl", Path(tmp) / f"other-{width}", seed=1, width=width)
            for mode in args.modes.split(","):
                env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
                if mode == "inproc":
                    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
                out = Path(tmp) / f"{width}-{mode}.json"
                done = subprocess.run(
                    [sys.executable, __file__, CHILD, str(base), str(other), args.dtype, str(args.bucket_mb),
                     str(args.repeats), str(out)],
                    env=env, capture_output=True, text=True, timeout=900,
                )  # fmt: skip
                if done.returncode != 0:
                    raise SystemExit(f"{width} {mode} failed:\n{done.stderr[-3000:]}")
                row: dict[str, Any] = {"width": width, "mode": mode, **json.loads(out.read_text())}
                row["time_ratio"] = round(row["folder"]["seconds"] / row["memory"]["seconds"], 2)
                memory_extra = row["memory"]["extra_mb"]  # null ratio: no extra memory measured (< 0.05 MB)
                row["memory_ratio"] = (
                    round(row["folder"]["extra_mb"] / memory_extra, 2) if memory_extra else None
                )
                rows.append(row)
                f, m = row["folder"], row["memory"]
                print(
                    f"width {width:5d} ({f['state_mb']:7.1f} MB {args.dtype}) {mode:6s} | "
                    f"folder {f['seconds'] * 1e3:8.1f} ms {f['extra_mb']:7.1f} MB | "
                    f"memory[{m['transport']}, {args.bucket_mb} MiB] {m['seconds'] * 1e3:8.1f} ms "
                    f"{m['extra_mb']:7.1f} MB | time x{row['time_ratio']}, host memory "
                    f"x{row['memory_ratio']}",
                    flush=True,
                )
    print(
        json.dumps({"dtype": args.dtype, "bucket_mb": args.bucket_mb, "repeats": args.repeats, "rows": rows})
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        base, other, dtype, bucket, repeats, out = sys.argv[2:8]
        result = child(base, other, dtype, int(bucket), int(repeats))
        Path(out).write_text(json.dumps(result))
    else:
        main()
