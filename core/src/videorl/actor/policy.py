"""The policy being trained (:class:`Actor`: the module, possibly FSDP-sharded, its optimizer, its
family's backend, the reference or the LoRA adapters) and what every driver does with it besides the
update: its weights for an engine's refresh, in the names and dtype the engine declares
(:func:`refresh_state`, :func:`engine_weights`), the learning rate of a step, an engine asleep."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from videorl.actor.lora import AdapterState
from videorl.backend import hub_checkpoint_layout
from videorl.generation import EngineCapabilities, capabilities_of
from videorl.runs.resume import ActorState

if TYPE_CHECKING:
    from torch.distributed.checkpoint.stateful import Stateful

    from videorl.actor.lora import Adapters
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.generation import RolloutEngine


@dataclass
class Actor:
    """The policy being trained (possibly FSDP-wrapped), its optimizer, and the backend of its family."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    backend: ModelBackend
    reference: torch.nn.Module | None = None  # frozen copy, only when the KL penalty is on
    compute_dtype: torch.dtype | None = (
        None  # autocast dtype of the forward (float32 masters); None: as stored
    )
    full_state: Callable[..., Iterator[tuple[str, torch.Tensor]]] | None = (
        None  # FSDP: iter_full_state of the sharded module (a collective, one tensor at a time)
    )
    lora: Adapters | None = None  # actor.lora: only these train, and they are all a checkpoint holds

    def weights(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The policy's full weights under the base model's names, for a rollout engine: with LoRA the
        adapters merged into the base weights (a copy; the module keeps them apart)."""
        return dict(self.weight_stream(dtype))

    def weight_stream(
        self, dtype: torch.dtype | None = None, *, on_device: bool = False, keep: bool = True
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """:meth:`weights` one tensor at a time (under FSDP a collective that every rank runs to its
        end, :func:`~videorl.actor.fsdp.iter_full_state`): ``on_device`` leaves gathered tensors on
        the device, ``keep=False`` has this rank take part without keeping anything. With LoRA the
        merge needs the whole state, gathered to the host first."""
        if self.lora is not None and keep:
            return iter(self.lora.merged(dict(self._stream(None, on_device=False, keep=True)), dtype).items())
        return self._stream(dtype, on_device=on_device, keep=keep)

    def _stream(
        self, dtype: torch.dtype | None, *, on_device: bool, keep: bool
    ) -> Iterator[tuple[str, torch.Tensor]]:
        if self.full_state is not None:
            return self.full_state(dtype, on_device=on_device, keep=keep)
        # One process: the module's own tensors, where they are, each cast on its device when taken
        return _cast(self.model.state_dict(), dtype) if keep else iter(())

    def checkpoint_state(self) -> Stateful:
        """What a checkpoint saves and a resume loads (:func:`videorl.runs.resume.save_checkpoint`):
        the model and its optimizer, or with LoRA the adapters and their optimizer states alone."""

        if self.lora is not None:
            return AdapterState(self.lora, self.optimizer)
        return ActorState(self.model, self.optimizer)

    def reference_policy(self) -> AbstractContextManager[torch.nn.Module | None]:
        """The reference policy of the KL term while in the ``with``: the frozen copy, or with LoRA this
        module with its adapters off; None when there is neither (reference workers compute it)."""
        return self.lora.disabled() if self.lora is not None else nullcontext(self.reference)


def _cast(state: dict[str, torch.Tensor], dtype: torch.dtype | None) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in state.items():
        yield name, tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor


def refresh_state(actor: Actor, engine: RolloutEngine) -> dict[str, torch.Tensor]:
    """The actor's weights for ``engine``'s refresh (a collective under FSDP), as it declares it wants
    them (:func:`engine_weights`), on the host."""
    return dict(_refresh_stream(actor, engine, on_device=False))


def refresh_engine(actor: Actor, engine: RolloutEngine) -> None:
    """Load the actor's current weights into ``engine`` (a collective under FSDP: every rank calls it).

    An engine that takes weights on the device (``takes_device_weights()``: a vLLM engine refreshed
    by CUDA IPC) gets them as they are gathered, one tensor at a time, never through host memory;
    any other gets them gathered on the host (:func:`refresh_state`); a rank whose engine holds no
    weights (``holds_weights`` false: a tensor-parallel group's rank beside its leader) takes part in
    each gather and keeps nothing. All walk the same gathers in the same order, so the ranks stay in
    step; what an engine leaves of the stream (or a failure midway) is gathered to the end
    here, so no rank is left waiting in a collective the others never join."""
    if not getattr(engine, "holds_weights", True):  # a tensor-parallel group's rank without the engine
        for _ in actor.weight_stream(None, on_device=True, keep=False):
            pass
        return
    takes = getattr(engine, "takes_device_weights", None)
    if not (callable(takes) and takes()):
        engine.update_weights(refresh_state(actor, engine))
        return
    stream = _refresh_stream(actor, engine, on_device=True)
    try:
        engine.update_weights_stream(stream)  # type: ignore[attr-defined]
    finally:
        for _ in stream:  # the gathers the engine did not consume (a failure), for the other ranks
            pass


def _refresh_stream(
    actor: Actor, engine: RolloutEngine, *, on_device: bool
) -> Iterator[tuple[str, torch.Tensor]]:
    capabilities = capabilities_of(engine)
    dtype = getattr(engine, "weights_dtype", None) if capabilities.weights_in_engine_dtype else None
    return engine_weight_stream(actor.backend, capabilities, actor.weight_stream(dtype, on_device=on_device))


def engine_weights(
    backend: ModelBackend, capabilities: EngineCapabilities, state: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """``state`` (the actor's full weights) in the names an engine loads: the Hub checkpoints' names and
    layout (:func:`~videorl.backend.hub_checkpoint_layout`), which vLLM's loaders expect, or the
    transformers module's own. The one place that decides it, for a refresh in place and for weights
    published to the rollout workers of a Ray run."""
    return dict(engine_weight_stream(backend, capabilities, iter(state.items())))


def engine_weight_stream(
    backend: ModelBackend, capabilities: EngineCapabilities, named: Iterator[tuple[str, torch.Tensor]]
) -> Iterator[tuple[str, torch.Tensor]]:
    """:func:`engine_weights` one tensor at a time: a backend's ``checkpoint_layout`` is applied to
    each tensor alone (a layout maps a tensor's name and layout, never several tensors into one)."""
    if capabilities.weights_layout == "transformers":
        yield from named
        return
    for name, tensor in named:
        yield from hub_checkpoint_layout(backend, {name: tensor}).items()


def set_learning_rate(optimizer: torch.optim.Optimizer, config: TrainConfig, step: int) -> None:
    """Constant ``optim.lr`` after a linear warm-up of ``optim.lr_warmup_steps`` steps (stateless,
    so a resumed run continues with the same schedule)."""
    warmup = config.optim.lr_warmup_steps
    lr = config.optim.lr * (min(1.0, step / warmup) if warmup > 0 else 1.0)
    for group in optimizer.param_groups:
        group["lr"] = lr


def sleep_engine(engine: RolloutEngine) -> None:
    """Let an engine that can (``sleep()``, e.g. vLLM's sleep mode on GPUs) free its device memory for
    the actor update; its next weight refresh wakes it."""
    if capabilities_of(engine).can_sleep:
        engine.sleep()  # type: ignore[attr-defined]
