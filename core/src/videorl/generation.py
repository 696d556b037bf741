"""What every rollout engine takes and returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from videorl.errors import ConfigError

if TYPE_CHECKING:
    from videorl.model_inputs import EncodedPrompt


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: ``n`` responses per prompt; ``temperature == 0`` means greedy."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k
    max_tokens: int = 256
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.n < 1 or self.max_tokens < 1:
            raise ConfigError(f"sampling: n ({self.n}) and max_tokens ({self.max_tokens}) must be >= 1")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ConfigError(
                f"sampling: temperature {self.temperature} must be >= 0, top_p {self.top_p} in (0, 1], "
                f"top_k {self.top_k} >= 0"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Completion:
    """One generated response: its token ids (ending with EOS when it stopped), their log-probs
    under the policy (temperature 1, forbidden ids masked), and why it ended (``stop`` or ``length``)."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"completion: {len(self.token_ids)} tokens but {len(self.logprobs)} log-probs")


@runtime_checkable
class RolloutEngine(Protocol):
    """A generator of responses; one engine per process holding a copy of the policy.

    An engine may also define ``sleep()``: release its device memory while the actor updates (the
    loop calls it before each update of an engine that holds its own copy); the next
    ``update_weights`` must bring it back.
    """

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions for each prompt, in prompt order."""
        ...

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Load the actor's current weights (HF parameter names, full tensors)."""
        ...

    def close(self) -> None:
        """Release the engine's resources."""
        ...


@dataclass(frozen=True)
class EngineCapabilities:
    """What a rollout engine declares about itself (a ``capabilities`` attribute of its class or
    factory), so that the trainer asks the engine instead of comparing engine names.

    - ``weights_layout``: the names ``update_weights`` expects, ``"hub"`` (the Hub checkpoint's names
      and layout, which vLLM's loaders read; :func:`~videorl.backend.hub_checkpoint_layout`) or
      ``"transformers"`` (the transformers module's own ``state_dict``).
    - ``weights_in_engine_dtype``: refreshed in the dtype the engine runs in (``weights_dtype`` of the
      instance, or the engine option ``dtype``): a bf16 engine then needs half the host memory of
      float32 masters. False: in the actor's dtype.
    - ``can_sleep``: ``sleep()`` frees its device memory for the update; the next refresh wakes it.
    - ``shares_actor_module``: in one process it can generate with the actor's own module (no copy,
      never refreshed); the factory then takes ``model=`` and ``owns_model=``.
    - ``own_devices``: it runs on accelerators of its own beside the actor's (placement asks).
    - ``incremental``: it can continue a generation with new tokens and media without encoding the
      earlier turns again (multi-turn workflows use it when true).
    """

    weights_layout: Literal["hub", "transformers"] = "hub"
    weights_in_engine_dtype: bool = True
    can_sleep: bool = False
    shares_actor_module: bool = False
    own_devices: bool = True
    incremental: bool = False


def capabilities_of(engine: object) -> EngineCapabilities:
    """The capabilities ``engine`` (an engine, its class or factory, or a wrapper holding one as
    ``engine``) declares; an engine that declares none gets the defaults (a vLLM-like engine)."""
    declared = getattr(engine, "capabilities", None)
    if declared is None and getattr(engine, "engine", None) is not None:
        return capabilities_of(engine.engine)  # type: ignore[attr-defined]
    if declared is None:
        return EngineCapabilities()
    if not isinstance(declared, EngineCapabilities):
        raise TypeError(f"{engine!r}.capabilities is {type(declared).__name__}, not EngineCapabilities")
    return declared
