"""What every rollout engine takes and returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

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
