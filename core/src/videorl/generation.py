"""What every rollout engine takes and returns."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from videorl.errors import ConfigError

if TYPE_CHECKING:
    from videorl.model_inputs import EncodedPrompt

#: the default size in MiB of a bucket of refreshed weights (``rollout.weight_bucket_mb``)
DEFAULT_BUCKET_MB = 512


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
    """What a rollout engine declares about itself (a ``capabilities`` attribute of its class), so that
    the trainer, the evaluator and the checks ask the engine instead of comparing engine names.

    - ``weights_layout``: the names ``update_weights`` expects, ``"hub"`` (the Hub checkpoint's names
      and layout, which vLLM's loaders read; :func:`~videorl.backend.hub_checkpoint_layout`) or
      ``"transformers"`` (the transformers module's own ``state_dict``).
    - ``weights_in_engine_dtype``: refreshed in the dtype the engine runs in (``weights_dtype`` of the
      instance, or the engine option ``dtype``): a bf16 engine then needs half the host memory of
      float32 masters. False: in the actor's dtype.
    - ``can_sleep``: ``sleep()`` frees its device memory for the update; the next refresh wakes it.
    - ``shares_actor_module``: in one process it can generate with the actor's own module (no copy,
      never refreshed): :attr:`EngineSpec.actor_module`.
    - ``own_devices``: it runs on accelerators of its own beside the actor's (placement asks); False:
      on the process's device (:attr:`EngineSpec.device`), with a concrete dtype.
    - ``incremental``: given a context that continues an earlier request (a multi-turn workflow's next
      turn), it does not encode the earlier turns' media again (vLLM: its encoder and prefix caches).
      Informational: workflows pass the whole context to every engine.
    - ``request_format``: what it generates from: ``"request"``, the backend's
      :meth:`~videorl.backend.ModelBackend.rollout_request` of each prompt (prompt ids, the frames and
      their metadata; an engine that processes media itself, as vLLM does), or ``"encoded"``, the
      backend's :meth:`~videorl.backend.ModelBackend.collate` of the encoded prompts (processed pixels
      and grids, the training forward's inputs).
    - ``async_variant``: the registered name of the same engine with ``submit(prompt, params)``
      (continuous batching); evaluation, which hands over each prompt as soon as it is encoded, uses
      it in this engine's place. None: the engine itself.
    """

    weights_layout: Literal["hub", "transformers"] = "hub"
    weights_in_engine_dtype: bool = True
    can_sleep: bool = False
    shares_actor_module: bool = False
    own_devices: bool = True
    incremental: bool = False
    request_format: Literal["request", "encoded"] = "request"
    async_variant: str | None = None


@dataclass(frozen=True)
class EngineSpec:
    """What the trainer (or the evaluator, a check) asks of the engine it builds: every engine gets all
    of it and uses what applies to it; ``rollout.engine_options`` come beside it and, where an engine
    takes an option of the same name (vLLM's ``dtype``, ``max_model_len``), win.

    - ``name``: the engine's registered name (for messages);
    - ``model_path``: the model folder to load (the actor's starting weights);
    - ``dtype``: ``float32``, ``bfloat16``, ``float16`` or ``auto`` (the checkpoint's);
    - ``seed``: the engine's own random seed (each rank's differs);
    - ``max_model_len``: the longest prompt plus response it must hold; None: its own default;
    - ``device``: where an engine without devices of its own (``own_devices=False``) puts its copy;
    - ``visible_devices``: the ``CUDA_VISIBLE_DEVICES`` of an engine's own processes
      (:mod:`videorl.rollout.placement`); None: leave them as they are;
    - ``weight_sync``, ``weight_bucket_mb``: how refreshed weights reach an engine of its own
      processes (``rollout.weight_sync``, ``rollout.weight_bucket_mb``);
    - ``actor_module``: the actor's own module, for an engine that can share it (``shares_actor_module``)
      in a run of one process; None: load a copy;
    - ``max_batch_prompts``: most prompts per forward batch (evaluation's ``pipeline.batch_size``);
      None: the engine's default;
    - ``max_num_batched_tokens``: most tokens per scheduler step of a continuously batching engine
      (chunked prefill); None: its default.
    """

    name: str
    model_path: str
    dtype: str = "auto"
    seed: int = 0
    max_model_len: int | None = None
    device: Any = None
    visible_devices: str | None = None
    weight_sync: Literal["memory", "folder"] = "memory"
    weight_bucket_mb: int = DEFAULT_BUCKET_MB
    actor_module: Any = None
    max_batch_prompts: int | None = None
    max_num_batched_tokens: int | None = None


class EngineFactory(Protocol):
    """What ``register_rollout_engines`` registers: usually the engine class itself, with its
    :class:`EngineCapabilities` and a ``from_spec`` constructor."""

    capabilities: EngineCapabilities

    def from_spec(self, backend: Any, spec: EngineSpec, options: Mapping[str, Any]) -> RolloutEngine:
        """The engine for ``backend``'s model as ``spec`` asks, with ``options``
        (``rollout.engine_options``), each of which it checks (:func:`check_engine_options`)."""
        ...


def check_engine_options(engine: str, options: Mapping[str, Any], valid: Collection[str]) -> None:
    """Refuse an option of ``options`` that is not in ``valid`` (the options the engine ``engine``
    takes): a :class:`ConfigError` naming it, the closest valid names and all of them."""
    for key in options:
        if key not in valid:
            close = difflib.get_close_matches(key, list(valid), n=2, cutoff=0.6)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ConfigError(
                f"rollout.engine_options.{key}: the {engine} engine takes no option {key!r}.{hint} "
                f"Its options: {', '.join(sorted(valid)) or '(none)'}"
            )


def capabilities_of(engine: object) -> EngineCapabilities:
    """The capabilities ``engine`` (an engine, its class, or a wrapper holding one as ``engine``)
    declares; an engine that declares none gets the defaults (a vLLM-like engine)."""
    declared = getattr(engine, "capabilities", None)
    if declared is None and getattr(engine, "engine", None) is not None:
        return capabilities_of(engine.engine)  # type: ignore[attr-defined]
    if declared is None:
        return EngineCapabilities()
    if not isinstance(declared, EngineCapabilities):
        raise TypeError(f"{engine!r}.capabilities is {type(declared).__name__}, not EngineCapabilities")
    return declared
