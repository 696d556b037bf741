"""The policy being trained (:class:`Actor`: the module, possibly FSDP-sharded, its optimizer, its
family's backend, the reference or the LoRA adapters) and what every driver does with it besides the
update: its weights for an engine's refresh, in the names and dtype the engine declares
(:func:`refresh_state`, :func:`engine_weights`), the learning rate of a step, an engine asleep."""

from __future__ import annotations

from collections.abc import Callable
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
    full_state_dict: Callable[[torch.dtype | None], dict[str, torch.Tensor]] | None = (
        None  # gathers FSDP shards
    )
    lora: Adapters | None = None  # actor.lora: only these train, and they are all a checkpoint holds

    def weights(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The policy's full weights under the base model's names, for a rollout engine: with LoRA the
        adapters merged into the base weights (a copy; the module keeps them apart)."""
        if self.lora is not None:
            return self.lora.merged(self._full_state(None), dtype)
        return self._full_state(dtype)

    def _full_state(self, dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
        if self.full_state_dict is not None:
            return self.full_state_dict(dtype)
        return _cast(self.model.state_dict(), dtype)

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


def _cast(state: dict[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    if dtype is None:
        return state
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}


def refresh_state(actor: Actor, engine: RolloutEngine) -> dict[str, torch.Tensor]:
    """The actor's weights for ``engine``'s refresh (a collective under FSDP), as it declares it wants
    them (:func:`engine_weights`)."""
    capabilities = capabilities_of(engine)
    state = actor.weights(
        getattr(engine, "weights_dtype", None) if capabilities.weights_in_engine_dtype else None
    )
    return engine_weights(actor.backend, capabilities, state)


def engine_weights(
    backend: ModelBackend, capabilities: EngineCapabilities, state: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """``state`` (the actor's full weights) in the names an engine loads: the Hub checkpoints' names and
    layout (:func:`~videorl.backend.hub_checkpoint_layout`), which vLLM's loaders expect, or the
    transformers module's own. The one place that decides it, for a refresh in place and for weights
    published to the rollout workers of a Ray run."""
    if capabilities.weights_layout == "transformers":
        return state
    return hub_checkpoint_layout(backend, state)


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
