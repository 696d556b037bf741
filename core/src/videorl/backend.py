"""The model-backend interface: what a model-family plugin implements, and how a checkpoint finds its backend.

A backend turns a :class:`~videorl.model_inputs.PromptInput` (text plus cached frames and images) into an
:class:`~videorl.model_inputs.EncodedPrompt` — tokenised **once** — from which both the rollout
request (:class:`~videorl.model_inputs.RolloutRequest`) and the batched teacher-forced training inputs
(:class:`~videorl.model_inputs.ModelInputs`) are derived, so both stages see the same prompt ids and
the same grids. Backends are registered by plugins through ``register_model_backends`` under their
family name, with the ``model_type`` values of ``config.json`` they serve as aliases.

Importing this module is cheap: torch is imported only by the functions that need it.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from videorl.errors import ConfigError, UnknownComponentError
from videorl.media.params import VisualBudget
from videorl.model_inputs import EncodedPrompt, ModelInputs, PromptInput, RolloutRequest

if TYPE_CHECKING:
    from videorl.registry import Registry

__all__ = [
    "ModelBackend",
    "PromptInput",
    "VisionSync",
    "VisualBudget",
    "backend_for_model",
    "engine_token_map",
    "hub_checkpoint_layout",
    "missing_backend_members",
    "read_model_type",
]


class VisionSync(Protocol):
    """The handle :meth:`ModelBackend.install_vision_sync` returns.

    ``dummy`` switches the zero-weighted dummy vision forward on or off (off only to show what breaks
    without it); ``dummy_calls`` counts the dummy forwards run; ``remove()`` uninstalls the hooks.
    """

    dummy: bool
    dummy_calls: int

    def remove(self) -> None: ...


class _StaticProtocolMeta(type(Protocol)):  # type: ignore[misc]
    """``isinstance`` against the protocol looks members up statically (as Python 3.12 does), so that
    it never evaluates a property such as ``processor``, which loads from disk or the HF Hub."""

    def __instancecheck__(cls, instance: object) -> bool:
        if cls is ModelBackend:
            return not missing_backend_members(instance)
        return bool(super().__instancecheck__(instance))


@runtime_checkable
class ModelBackend(Protocol, metaclass=_StaticProtocolMeta):
    """A model family: its geometry, how to load it, and how samples become model inputs.

    Constructed with the checkpoint directory (``backend = Backend(path)``); the class attributes
    are readable without one (``videorl models list``). ``isinstance(obj, ModelBackend)`` and
    :func:`missing_backend_members` check the members without evaluating any property.
    """

    family: str
    model_types: tuple[str, ...]
    path: Path | None  # the checkpoint directory
    factor: int  # patch size × spatial merge size: frame sides must be multiples of it
    temporal_patch_size: int  # frames per temporal patch (odd counts are padded with the last frame)

    @property
    def budget(self) -> VisualBudget:
        """The default visual budget of this family."""
        ...

    def load_model(self, *, dtype: Any = None, device: Any = None) -> Any:
        """The model, from the checkpoint directory (``from_pretrained``), prepared
        (:meth:`prepare_model`)."""
        ...

    def prepare_model(self, model: Any) -> Any:
        """Apply the backend's fixes to a model built elsewhere (e.g. the 3-D positions the engine uses)."""
        ...

    @property
    def processor(self) -> Any:
        """The HF processor (tokenizer, image and video processors) of the checkpoint, loaded once."""
        ...

    @property
    def tokenizer(self) -> Any:
        """The processor's tokenizer: the one every stage tokenises and decodes with."""
        ...

    def prompt_length(self, prompt: PromptInput) -> int:
        """Tokens of the prompt with its visual tokens, counted from the grids without processing pixels."""
        ...

    def encode(self, prompt: PromptInput) -> EncodedPrompt:
        """Tokenise once and process pixels; raises :class:`~videorl.errors.AlignmentError` on a mismatch."""
        ...

    def collate(
        self,
        encoded: Sequence[EncodedPrompt],
        responses: Sequence[Sequence[int] | EncodedPrompt] | None = None,
    ) -> ModelInputs:
        """A left-padded batch: prompts only (generation), or prompts + responses (teacher forcing); a
        response with tool replies' media is an :class:`EncodedPrompt` (``collate_encoded`` takes it)."""
        ...

    def check_inputs(self, inputs: ModelInputs) -> None:
        """The strict alignment check of a batch; raises :class:`~videorl.errors.AlignmentError`."""
        ...

    def rollout_request(self, encoded: EncodedPrompt) -> RolloutRequest:
        """The rollout-engine request for one prompt (vLLM: compact ids + frames + metadata)."""
        ...

    def forbidden_token_ids(self) -> frozenset[int]:
        """Ids the policy must never emit: visual placeholders and padded-vocabulary ids."""
        ...

    def end_of_turn_id(self) -> int:
        """The token that ends an assistant turn in the chat template (Qwen's ``<|im_end|>``): what ends
        an offline trajectory, as it ends a generated response."""
        ...

    def install_vision_sync(self, model: Any) -> VisionSync:
        """Make every forward run the vision tower exactly once (a zero-weighted dummy when no pixels)."""
        ...

    # Optional: ``build_tiny(out_dir, *, model_type=None, seed=0, width=64) -> Path`` (a classmethod)
    # writes a tiny random checkpoint of the family (``width``: the text hidden size);
    # ``videorl models tiny`` calls it.
    # Optional: ``pack_inputs(inputs: ModelInputs) -> PackedInputs`` puts a teacher-forced batch in one
    # padding-free row (``actor.padding_free``, :mod:`videorl.packing`); ``packing_unsupported`` (a
    # reason, or None) declines it. Without ``pack_inputs`` the micro-batches are padded.
    # Optional: ``vision_once(model, inputs: ModelInputs) -> ContextManager`` runs the vision tower once per
    # distinct prompt of a teacher-forced micro-batch (a prompt's n responses are n rows): ``inputs`` holds
    # each distinct prompt's ``pixel_values``/``pixel_values_videos`` once and ``inputs.shared_items`` maps
    # every item (row of its grid; the grids stay per row, for the positions) to the distinct item it uses
    # (:mod:`videorl.shared_vision`); within the context, the forwards of ``model`` feed each distinct item's
    # embeddings to all of its rows. Without it every row's pixels go through the tower.
    # Optional: ``sequence_parallel_text_model(model) -> module`` names the decoder stack whose keyword
    # ``inputs_embeds`` and ``position_ids`` sequence parallelism slices (``actor.sequence_parallel_size``,
    # :mod:`videorl.actor.ulysses`); ``sequence_parallel_unsupported`` (a reason, or None) declines it.
    # Optional: ``sequence_parallel_vision(model, shard) -> ContextManager``: within, a sequence-parallel
    # forward of ``model`` runs the vision tower on this rank's share of the temporal patches only
    # (``shard``: :class:`videorl.actor.tower_shard.TowerShard`, whose ``assign`` gives each patch its
    # rank and whose ``gather`` all-gathers the embeddings with their gradient); for a tower that
    # attends within one temporal patch. Without it the whole tower runs on every rank of the group
    # (:func:`shards_vision_tower`).
    # Optional: ``checkpoint_layout(state: dict[str, Tensor]) -> dict[str, Tensor]`` gives the policy's
    # weights (transformers' names and layout) in the names and layout of the family's Hub checkpoints,
    # which vLLM's loaders expect; a vLLM engine's weight refresh goes through it
    # (:func:`hub_checkpoint_layout`). Without it the weights go as transformers holds them. It maps
    # each tensor on its own (a refresh streams the weights and calls it with one tensor at a time).
    # Optional: ``engine_token_map: Mapping[int, int]`` (an attribute or property): the placeholder ids a
    # rollout engine writes where the training model has other ids (engine id -> training id; InternVL in vLLM
    # writes ``<video>`` per frame where transformers scatters at ``<IMG_CONTEXT>``). The engine's
    # prompt check (every rollout, hence the first-step check, and ``videorl models check``) reads
    # the engine's ids through it (:func:`engine_token_map`); without it the ids must be equal.


#: members set on the instance (``__init__``), so absent from a backend class
_INSTANCE_MEMBERS = frozenset({"path"})


def missing_backend_members(backend: object) -> list[str]:
    """The :class:`ModelBackend` members that ``backend`` (a class or an instance) lacks, sorted.

    Looked up with :func:`inspect.getattr_static`: nothing is called and no property is evaluated.
    For a class, instance attributes (``path``) are not required.
    """
    members = set(ModelBackend.__annotations__) | {n for n in vars(ModelBackend) if not n.startswith("_")}
    if isinstance(backend, type):
        members -= _INSTANCE_MEMBERS
    missing = []
    for name in sorted(members):
        try:
            inspect.getattr_static(backend, name)
        except AttributeError:
            missing.append(name)
    return missing


def shards_vision_tower(backend: object) -> bool:
    """Whether sequence parallelism shards ``backend``'s vision tower by temporal patches: it has
    ``sequence_parallel_vision`` and does not decline sequence parallelism."""
    declined = getattr(backend, "sequence_parallel_unsupported", None)
    return getattr(backend, "sequence_parallel_vision", None) is not None and not declined


def hub_checkpoint_layout(backend: object, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (the policy's weights) in the Hub checkpoints' names and layout: the backend's
    optional ``checkpoint_layout``, or ``state`` itself (the family's transformers layout is the Hub's)."""
    layout = getattr(backend, "checkpoint_layout", None)
    return state if layout is None else dict(layout(state))


#: the most entries an ``engine_token_map`` may hold (a family has a handful of placeholder ids)
MAX_ENGINE_TOKEN_MAP = 1024


def engine_token_map(backend: object) -> dict[int, int]:
    """The backend's optional ``engine_token_map`` (engine id -> training id) checked: at most
    :data:`MAX_ENGINE_TOKEN_MAP` pairs of non-negative ints, no id mapped to itself; ``{}`` without one.

    Plugin metadata is checked like any input: a bad map raises :class:`~videorl.errors.ConfigError`
    naming the backend and the entry."""
    mapping = getattr(backend, "engine_token_map", None)  # a property may read the ids from the tokenizer
    if mapping is None:
        return {}
    name = getattr(backend, "family", type(backend).__name__)
    if not isinstance(mapping, Mapping) or len(mapping) > MAX_ENGINE_TOKEN_MAP:
        raise ConfigError(
            f"model backend {name!r}: engine_token_map must be a mapping of at most {MAX_ENGINE_TOKEN_MAP} "
            f"engine token ids to training token ids, not {type(mapping).__name__}"
        )
    out: dict[int, int] = {}
    for engine, training in mapping.items():
        ok = all(type(t) is int and t >= 0 for t in (engine, training))  # bool is no token id
        if not ok or engine == training:
            raise ConfigError(
                f"model backend {name!r}: engine_token_map entry {engine!r}: {training!r} must map an engine "
                "token id to another training token id (non-negative ints)"
            )
        out[engine] = training
    return out


def read_model_type(path: str | Path) -> str:
    """The ``model_type`` of the checkpoint directory ``path`` (from its ``config.json``)."""
    config = Path(path) / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{config} does not exist: a model directory must hold a config.json "
            "(build a tiny one with `videorl models tiny FAMILY DIR`)"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{config} could not be read as JSON: {exc}") from exc
    model_type = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(f"{config} has no 'model_type' string; cannot choose a model backend")
    return model_type


def backend_for_model(path: str | Path, backends: Registry[Any], **options: Any) -> ModelBackend:
    """The backend serving the checkpoint at ``path``, chosen by its ``model_type``.

    An unknown ``model_type`` raises :class:`~videorl.errors.UnknownComponentError` naming the
    directory, the type and the registered backends.
    """
    model_type = read_model_type(path)
    try:
        name = backends.canonical(model_type)
    except UnknownComponentError as exc:
        raise UnknownComponentError(
            f"{Path(path) / 'config.json'}: model_type {model_type!r} is served by no installed model "
            f"backend ({exc}). Install the plugin that provides it (videorl-models serves the Qwen-VL "
            "families), or check `videorl models list`."
        ) from None
    backend: ModelBackend = backends.create(name, path=Path(path), **options)
    return backend
