"""The executor of a tensor-parallel vLLM engine (:data:`videorl.rollout.vllm_common.TP_EXECUTOR`).

Inside a Ray actor with a placement group, vLLM picks its ``ray`` executor for a world size above 1,
and that executor refuses a bundle of more than one GPU; a split-placement rollout worker's engine
of TP 2 (``examples/multi-node.yaml``: bundles of 2 GPUs) could not start. The options the engines
build name vLLM's ``mp`` executor for TP > 1, and vLLM's own configuration, resolved inside a Ray
actor placed in a 2-CPU bundle, keeps it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from videorl.rollout.vllm_common import TP_EXECUTOR, engine_options

pytest.importorskip("vllm")

BASE: dict[str, Any] = {
    "dtype": "float32",
    "seed": 0,
    "enforce_eager": True,
    "gpu_memory_utilization": 0.5,
    "max_media_per_prompt": 1,
}


def test_tensor_parallel_engines_run_their_ranks_as_processes_of_their_own() -> None:
    tp2 = engine_options(Path("/m"), tensor_parallel_size=2, **BASE)
    assert tp2["distributed_executor_backend"] == TP_EXECUTOR == "mp"
    assert "distributed_executor_backend" not in engine_options(Path("/m"), tensor_parallel_size=1, **BASE)
    # a user's choice (rollout.engine_options) wins: e.g. ray for an engine spread over nodes
    mine = engine_options(Path("/m"), tensor_parallel_size=2, distributed_executor_backend="ray", **BASE)
    assert mine["distributed_executor_backend"] == "ray"


class _Worker:
    """A Ray actor like a split rollout worker: it builds the engine's options and lets vLLM resolve
    them into its configuration (where vLLM records the actor's placement group and picks an executor)."""

    def resolve(self, model: str, tensor_parallel_size: int, ours: bool) -> dict[str, Any]:
        import ray
        from vllm.engine.arg_utils import EngineArgs

        options = engine_options(Path(model), tensor_parallel_size=tensor_parallel_size, **BASE)
        if not ours:  # vLLM's own choice
            options.pop("distributed_executor_backend", None)
        parallel = EngineArgs(**options).create_engine_config().parallel_config
        return {
            "options": options,
            "placement_group": ray.util.get_current_placement_group() is not None,
            "executor": parallel.distributed_executor_backend,
            "world_size": parallel.world_size,
        }


@pytest.mark.slow
def test_a_ray_rollout_worker_of_tp2_in_a_two_cpu_bundle_keeps_the_mp_executor(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from videorl_models.tiny import build_tiny

    model = build_tiny("qwen2_5_vl", tmp_path / "model", seed=0)
    # a new runtime: `ray start` in an earlier test leaves a record of its cluster, which Ray would join
    try:  # a failed start too is shut down: its half-started node would break later tests' runtimes
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        pg = placement_group([{"CPU": 2}], strategy="PACK")
        ray.get(pg.ready(), timeout=60)
        worker = (
            ray.remote(_Worker)
            .options(
                num_cpus=2,
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
            )
            .remote()
        )
        ours = ray.get(worker.resolve.remote(str(model), 2, True), timeout=180)
        theirs = ray.get(worker.resolve.remote(str(model), 2, False), timeout=180)
    finally:
        ray.shutdown()
    assert ours["placement_group"] and theirs["placement_group"]
    assert ours["options"]["tensor_parallel_size"] == ours["world_size"] == 2
    assert ours["executor"] == "mp"
    # what vLLM picks by itself there: the ray executor, which refuses a bundle of 2 GPUs
    assert theirs["executor"] == "ray"
