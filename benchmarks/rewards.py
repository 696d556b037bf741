"""Throughput of ``videorl reward`` and the bound on hanging inputs, measured in one run.

Prints one JSON line:

- ``rows_per_s_1_worker`` / ``rows_per_s_2_workers``: 10,000 mixed rows (2,000 each of multiple
  choice, numerical, temporal grounding, open-ended and math; one response per row, half of them
  right) scored end to end by the ``reward`` command in this process (read, parse, score, atomic
  write), best of ``--repeats``; ``speedup_2v1`` their ratio (bounded by the free cores: 2 here);
- ``per_type_us_1_worker``: microseconds per response of each type, scored alone by the router;
- ``hang_batch``: one router batch of math and code inputs where a quarter of each hang (a sympy
  power tower with math-verify's own timeouts off, ``while True: pass``), math and code timeouts
  ``--hang-timeout`` seconds: ``seconds`` it took, ``bound_s`` = (hanging math + hanging code) ×
  timeout + 3 s of worker restarts per hanging math input, and whether the hanging inputs scored
  0.1 (format only) and the others 1.0;
- ``code_sandbox``: the cost of the code sandbox's isolation, both ways in the same run, alternated:
  ``ms_per_call`` of one program with 3 assert tests run alone (``isolated``: bubblewrap namespaces,
  seccomp and rlimits; ``unisolated``: the opt-in fallback, rlimits and an audit hook) and
  ``isolation_cost_ms`` their difference (best of ``--repeats``); ``rows_per_s`` of ``--code-rows``
  code rows scored by the router (8 threads) each way; and the ``level`` of isolation found.

Usage: ``python benchmarks/rewards.py [--rows N] [--repeats N] [--hang-timeout S] [--code-rows N]``
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from videorl.cli import make_cli
from videorl.data.sample import Sample
from videorl.plugins import load_plugins
from videorl.rewards import RewardConfig, RewardInput, RewardRouter
from videorl_rewards.python_code import CodeReward
from videorl_rewards.sandbox import Limits, isolation, run_python

TYPES = ("multiple choice", "numerical", "temporal grounding", "open-ended", "math")


def make_row(i: int, rng: random.Random) -> dict[str, Any]:
    kind = TYPES[i % len(TYPES)]
    right = rng.random() < 0.5
    sample: dict[str, Any]
    if kind == "multiple choice":
        letter = "ABCD"[i % 4]
        answer = letter if right else "ABCD"[(i + 1) % 4]
        sample = {"options": ["A. red", "B. blue", "C. green", "D. yellow"], "answer": letter}
        response = f"<think>The square looks {answer}.</think><answer>{answer}</answer>"
    elif kind == "numerical":
        sample = {"answer": str(i % 50)}
        response = f"<answer>{i % 50 if right else i % 50 + 1}</answer>"
    elif kind == "temporal grounding":
        start = float(i % 30)
        sample = {"answer": {"time": [start, start + 5]}}
        response = f'<answer>{{"time": [{start + (0 if right else 2)}, {start + 5}]}}</answer>'
    elif kind == "open-ended":
        sample = {"answer": "a man in a red jacket rides a bicycle across the bridge"}
        text = "a man in a red jacket rides a bicycle" if right else "a woman walks a dog in the park"
        response = f"<answer>{text}</answer>"
    else:
        numerator, denominator = i, i % 9 + 2  # a different problem on every row: no cache hits
        sample = {"answer": f"\\frac{{{numerator}}}{{{denominator}}}"}
        response = f"<answer>{numerator / denominator + (0 if right else 1)}</answer>"
    return {"id": str(i), "problem": "Q?", "problem_type": kind, **sample, "response": response}


def run_command(rows: Path, out: Path, workers: int) -> float:
    cli = make_cli(load_plugins())
    start = time.perf_counter()
    try:
        cli.main(
            ["reward", "--input", str(rows), "--output", str(out), "--workers", str(workers)],
            standalone_mode=False,
        )
    except SystemExit as exc:  # pragma: no cover - only on bad rows
        raise RuntimeError(f"videorl reward exited with {exc.code}") from exc
    return time.perf_counter() - start


def per_type(rows: list[dict[str, Any]]) -> dict[str, float]:
    plugins = load_plugins()
    router = RewardRouter.from_registry(plugins.rewards)
    out = {}
    for kind in TYPES:
        inputs = [RewardInput.from_sample(r, r["response"]) for r in rows if r["problem_type"] == kind]
        router.score(inputs[:50])  # warm up (the math worker starts here)
        start = time.perf_counter()
        router.score(inputs)
        out[kind] = round((time.perf_counter() - start) / len(inputs) * 1e6, 1)
    router.reward("math").close()
    return out


def hang_batch(timeout: float) -> dict[str, Any]:
    plugins = load_plugins()
    config = RewardConfig(
        options={"math": {"timeout": timeout, "sympy_timeout": 0}, "code": {"timeout": timeout}}
    )
    router = RewardRouter.from_registry(plugins.rewards, config)
    inputs = []
    for i in range(12):
        hang = i % 4 == 0
        inputs.append(
            RewardInput(
                "<answer>9^{9^{9^{9}}}</answer>" if hang else "<answer>0.5</answer>",
                "math",
                "1" if hang else "\\frac{1}{2}",
                sample_id=f"math{i}",
            )
        )
        code = "while True:\n    pass" if hang else "def f(x):\n    return x + 1"
        inputs.append(
            RewardInput(
                f"<answer>{code}</answer>",
                "code",
                "",
                sample_id=f"code{i}",
                extra={"tests": ["assert f(1) == 2"]},
            )
        )
    router.validate([Sample(x.sample_id, "text", "", x.problem_type) for x in inputs])
    router.score([inputs[1]])  # start the math worker outside the measurement
    start = time.perf_counter()
    outs = router.score(inputs)
    seconds = time.perf_counter() - start
    router.reward("math").close()
    hanging = [x.response.startswith("<answer>9^") or "while True" in x.response for x in inputs]
    expected = [0.1 if h else 1.0 for h in hanging]
    scores = [o.score if o else None for o in outs]
    n_math = sum(h for h, x in zip(hanging, inputs, strict=True) if x.problem_type == "math")
    n_code = sum(hanging) - n_math
    bound = (n_math + n_code) * timeout + 3.0 * n_math
    return {
        "inputs": len(inputs),
        "hanging_math": n_math,
        "hanging_code": n_code,
        "timeout_s": timeout,
        "seconds": round(seconds, 2),
        "bound_s": round(bound, 2),
        "within_bound": seconds <= bound,
        "scores_as_expected": all(abs((s or 0) - e) < 1e-9 for s, e in zip(scores, expected, strict=True)),
    }


def code_sandbox(rows: int, repeats: int) -> dict[str, Any]:
    """Per-call cost and router throughput of the code reward, isolated and not, measured alternately."""
    program = "def add(a, b):\n    return a + b"
    tests = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]
    calls = 20
    per_call: dict[str, float] = {}
    throughput: dict[str, float] = {}
    reward = CodeReward()  # refuses where the machine cannot isolate: then there is nothing to compare
    router = RewardRouter.of({"code": reward})
    inputs = [
        RewardInput(f"<answer>{program}</answer>", "code", "", sample_id=f"c{i}", extra={"tests": tests})
        for i in range(rows)
    ]
    for _ in range(repeats):
        for isolated in (True, False):
            key = "isolated" if isolated else "unisolated"
            start = time.perf_counter()
            for _ in range(calls):
                run = run_python(program, tests, mode="assert", limits=Limits(), isolated=isolated)
                assert all(r.get("ok") for r in run.reports.values()) and len(run.reports) == 3
            per_call[key] = min(per_call.get(key, float("inf")), (time.perf_counter() - start) / calls * 1e3)
            reward.isolated = isolated
            start = time.perf_counter()
            outs = router.score(inputs)
            assert all(o is not None and o.score == 1.0 for o in outs)
            throughput[key] = max(throughput.get(key, 0.0), rows / (time.perf_counter() - start))
    return {
        "level": isolation().level,
        "ms_per_call": {k: round(v, 1) for k, v in per_call.items()},
        "isolation_cost_ms": round(per_call["isolated"] - per_call["unisolated"], 1),
        "rows": rows,
        "rows_per_s": {k: round(v, 1) for k, v in throughput.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--hang-timeout", type=float, default=1.0)
    parser.add_argument("--code-rows", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(0)
    rows = [make_row(i, rng) for i in range(args.rows)]
    result: dict[str, Any] = {"rows": args.rows, "types": list(TYPES)}
    with tempfile.TemporaryDirectory(prefix="videorl-bench-rewards-") as tmp:
        path = Path(tmp, "rows.jsonl")
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        times: dict[int, float] = {}
        for _ in range(args.repeats):
            for workers in (1, 2):  # alternated, so that machine noise hits both
                elapsed = run_command(path, Path(tmp, f"out{workers}.jsonl"), workers)
                times[workers] = min(times.get(workers, float("inf")), elapsed)
        same = Path(tmp, "out1.jsonl").read_text() == Path(tmp, "out2.jsonl").read_text()
    result["rows_per_s_1_worker"] = round(args.rows / times[1], 1)
    result["rows_per_s_2_workers"] = round(args.rows / times[2], 1)
    result["speedup_2v1"] = round(times[1] / times[2], 2)
    result["outputs_identical"] = same
    result["per_type_us_1_worker"] = per_type(rows)
    result["hang_batch"] = hang_batch(args.hang_timeout)
    result["code_sandbox"] = code_sandbox(args.code_rows, args.repeats)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
