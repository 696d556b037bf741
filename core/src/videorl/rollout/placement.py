"""Where each training rank's rollout engine runs: its GPUs, its tensor-parallel group, its leader.

Under torchrun every rank is one process on one GPU (``cuda:LOCAL_RANK``). A vLLM engine started
from such a process would use GPU 0 (its single-process executor takes local rank 0), so all engines
of a node would land on one GPU. Each engine is therefore given the GPUs it may see
(``CUDA_VISIBLE_DEVICES`` of the engine's own processes, set while they start):

- tensor parallel 1: every rank hosts an engine on its own GPU;
- tensor parallel ``t``: ranks form groups of ``t`` consecutive ranks of one node; the first rank of
  each group (its leader) hosts one engine over the group's ``t`` GPUs, and the other ranks hand
  their prompts to it (:class:`GroupedEngine`), so every GPU holds exactly one engine shard.

:func:`engine_placement` is pure: the layout can be checked without GPUs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from videorl.errors import ConfigError
from videorl.generation import Completion, EngineCapabilities, SamplingParams

if TYPE_CHECKING:
    from videorl.generation import RolloutEngine
    from videorl.model_inputs import EncodedPrompt


@dataclass(frozen=True)
class EnginePlacement:
    """One rank's share of the rollout engines."""

    rank: int
    group: tuple[int, ...]  # the ranks whose prompts one engine generates (the tensor-parallel group)
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES of the engine's processes; None: leave as it is

    @property
    def leader(self) -> int:
        return self.group[0]

    @property
    def hosts_engine(self) -> bool:
        return self.rank == self.leader


def engine_placement(
    *,
    rank: int,
    world_size: int,
    local_rank: int,
    local_world_size: int,
    tensor_parallel_size: int,
    visible_devices: str | None = None,
    cuda: bool = True,
) -> EnginePlacement:
    """The placement of rank ``rank``'s engine.

    ``visible_devices`` is the training process's own ``CUDA_VISIBLE_DEVICES`` (None: all devices,
    numbered from 0); local rank ``i`` trains on its ``i``-th entry. Without ``cuda`` no device is
    chosen (the CPU build of vLLM).
    """
    tp = tensor_parallel_size
    if tp < 1:
        raise ConfigError(f"rollout.engine_options.tensor_parallel_size must be >= 1, got {tp}")
    if world_size == 1:  # one process: the engine sees what the process sees (vLLM picks its GPUs)
        return EnginePlacement(rank, (rank,), None)
    if local_world_size % tp or world_size % tp:
        raise ConfigError(
            f"rollout.engine_options.tensor_parallel_size={tp} must divide the processes per node "
            f"({local_world_size}): an engine spans GPUs of one node, each used by one training process"
            + (
                " (a Ray actor worker holds one GPU: use ray.placement=split for tensor-parallel engines)"
                if local_world_size == 1
                else ""
            )
        )
    first = rank - rank % tp
    group = tuple(range(first, first + tp))
    if not cuda:
        return EnginePlacement(rank, group, None)
    devices = (
        [d.strip() for d in visible_devices.split(",")]
        if visible_devices
        else [str(i) for i in range(local_world_size)]
    )
    if len(devices) < local_world_size:
        raise ConfigError(
            f"CUDA_VISIBLE_DEVICES={visible_devices!r} lists {len(devices)} device(s) for "
            f"{local_world_size} processes on this node"
        )
    local_first = local_rank - local_rank % tp
    return EnginePlacement(rank, group, ",".join(devices[local_first : local_first + tp]))


class GroupedEngine:
    """The rollout engine of a tensor-parallel group, seen from each of its ranks.

    The leader's ``engine`` generates the prompts of the whole group (gathered over ``group``, a
    process group of the group's ranks; the leader's sampling parameters apply) and each rank gets
    back the completions of its own prompts. The other ranks hold no engine: their weight refreshes
    and sleeps are the leader's.
    """

    def __init__(
        self,
        engine: RolloutEngine | None,
        placement: EnginePlacement,
        group: Any,
        weights_dtype: Any,
        capabilities: EngineCapabilities,
    ) -> None:
        """``weights_dtype`` and ``capabilities``: the dtype the group's refresh is gathered in and what
        the engine declares, the same on every rank (the others hold no engine to ask)."""
        self.engine, self.placement, self.group = engine, placement, group
        self.weights_dtype, self.capabilities = weights_dtype, capabilities

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        import torch.distributed as dist

        # An engine of rollout requests needs the ids and the frames, not the processed pixels (4x the
        # frames in float32).
        light = (
            [dataclasses.replace(p, visual={}) for p in prompts]
            if self.capabilities.request_format == "request"
            else list(prompts)
        )
        leader, size = self.placement.leader, len(self.placement.group)
        gathered: list[Any] = [None] * size if self.placement.hosts_engine else []
        dist.gather_object((light, params), gathered or None, dst=leader, group=self.group)
        results: list[Any] = [None] * size
        if self.placement.hosts_engine:
            assert self.engine is not None
            flat = [p for share, _ in gathered for p in share]
            outputs = self.engine.generate(flat, params)
            start = 0
            for i, (share, _) in enumerate(gathered):
                results[i] = outputs[start : start + len(share)]
                start += len(share)
        mine: list[Any] = [None]
        dist.scatter_object_list(
            mine, results if self.placement.hosts_engine else None, src=leader, group=self.group
        )
        return list(mine[0])

    def sleep(self) -> None:
        if self.engine is not None and self.capabilities.can_sleep:
            self.engine.sleep()  # type: ignore[attr-defined]

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        if self.engine is not None:
            self.engine.update_weights(state_dict)

    @property
    def holds_weights(self) -> bool:
        """Whether this rank hosts the engine (the others' part of a refresh is the gathers alone)."""
        return self.engine is not None

    def takes_device_weights(self) -> bool:
        """The leader's engine's answer (:func:`videorl.actor.policy.refresh_engine`); False elsewhere,
        where the weights are gathered and dropped."""
        takes = getattr(self.engine, "takes_device_weights", None)
        return bool(callable(takes) and takes())

    def update_weights_stream(self, named: Iterable[tuple[str, Any]]) -> None:
        if self.engine is not None:
            self.engine.update_weights_stream(named)  # type: ignore[attr-defined]

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
