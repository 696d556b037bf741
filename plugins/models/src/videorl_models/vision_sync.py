"""Exactly one vision-tower forward per model forward, on every rank, at the same point.

Under FSDP every rank must gather and reduce the same parameters in the same order. Three hooks on
a Qwen-VL model make the vision tower run exactly once per forward whatever the micro-batch holds:

- before the inner model runs, the batch is checked (placeholders vs grids vs ``mm_token_type_ids``),
  and when it holds images *and* videos they go through the tower in one call (split back into the
  model's ``mm_encoder_outputs``), instead of two calls a video-only rank would not make; within
  :meth:`QwenVisionSync.sharing` (the backend's ``vision_once``: a prompt's pixels once for its
  several rows, :mod:`videorl.shared_vision`) that call encodes the distinct items only and each
  item of the batch gets its distinct item's embeddings;
- within :meth:`QwenVisionSync.sharding_tower` (a sequence-parallel forward, the backend's
  ``sequence_parallel_vision``) that call runs on this rank's share of the temporal patches only and
  the embeddings are all-gathered (:mod:`videorl_models.vision_shard`);
- when the batch has no pixels at all, a zero-weighted dummy forward (16 zero patches, grid 1×4×4)
  runs just before the language model — the point where the real features are consumed — and
  ``0 · mean`` of its outputs (the DeepStack outputs too, for Qwen3-VL) is added to the input
  embeddings, so every vision parameter receives a (zero) gradient.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

from videorl.api import ModelInputs
from videorl_models.vision_shard import Shard, encode_sharded, joined, unit_keys

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    import torch

__all__ = ["QwenVisionHooks", "QwenVisionSync", "tower_sharded", "vision_once"]

_DUMMY_GRID = (1, 4, 4)
#: (modality, pixel field, grid field), in the order the tower takes them
_MODALITIES = (
    ("image", "pixel_values", "image_grid_thw"),
    ("video", "pixel_values_videos", "video_grid_thw"),
)
#: the hooks installed on each inner model (``vision_once`` finds them there)
_INSTALLED: WeakKeyDictionary[Any, QwenVisionSync] = WeakKeyDictionary()


class _Backend(Protocol):
    """What the hooks need of the Qwen-VL backend (a protocol, so this module need not import it)."""

    @property
    def merge_size(self) -> int: ...

    @property
    def token_ids(self) -> dict[str, int]: ...

    def check_inputs(self, inputs: ModelInputs) -> None: ...


class QwenVisionSync:
    """The installed hooks (see the module docstring); ``remove()`` uninstalls them."""

    def __init__(self, model: Any, *, backend: _Backend) -> None:
        inner = getattr(model, "model", model)
        if not (hasattr(inner, "visual") and hasattr(inner, "language_model")):
            raise TypeError(
                f"{type(model).__name__} has no .model.visual / .model.language_model: not a Qwen-VL model"
            )
        self.backend = backend
        self.visual = inner.visual
        self.dummy = True
        self.dummy_calls = 0
        self._visual_ran = False
        self._shared: dict[str, tuple[int, ...]] = {}
        self._tower: Shard | None = None
        self._inner = inner
        _INSTALLED[inner] = self
        self._handles = [
            inner.register_forward_pre_hook(self._before_model, with_kwargs=True),
            self.visual.register_forward_hook(self._after_visual),
            inner.language_model.register_forward_pre_hook(self._before_language_model, with_kwargs=True),
        ]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if _INSTALLED.get(self._inner) is self:
            del _INSTALLED[self._inner]

    @contextmanager
    def sharing(self, items: dict[str, tuple[int, ...]]) -> Iterator[None]:
        """Within: each forward's pixels are the distinct items of ``items``
        (:attr:`ModelInputs.shared_items`), encoded once and handed to every item that uses them."""
        self._shared = items
        try:
            yield
        finally:
            self._shared = {}

    @contextmanager
    def sharding_tower(self, shard: Shard) -> Iterator[None]:
        """Within: each forward's tower runs on this rank's share of the temporal patches only."""
        self._tower = shard
        try:
            yield
        finally:
            self._tower = None

    # -- hooks -----------------------------------------------------------------------------------

    def _after_visual(self, module: Any, args: Any, output: Any) -> None:
        self._visual_ran = True

    def _before_model(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        self._visual_ran = False
        images, videos = kwargs.get("pixel_values"), kwargs.get("pixel_values_videos")
        if (images is not None or videos is not None) and kwargs.get("input_ids") is not None:
            self._check(kwargs)
        pixels = images is not None or videos is not None
        if self._shared or (images is not None and videos is not None) or (self._tower and pixels):
            kwargs = dict(kwargs)
            kwargs["mm_encoder_outputs"] = self._features(kwargs, self._shared)
        return args, kwargs

    def _before_language_model(
        self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, Any] | None:
        ran, self._visual_ran = self._visual_ran, False
        embeds = kwargs.get("inputs_embeds")
        if ran or not self.dummy or embeds is None:
            return None
        kwargs = dict(kwargs)
        kwargs["inputs_embeds"] = embeds + self._dummy_term().to(embeds.dtype)
        return args, kwargs

    # -- helpers ---------------------------------------------------------------------------------

    def _check(self, kwargs: dict[str, Any]) -> None:
        input_ids = kwargs["input_ids"]
        mask = kwargs.get("attention_mask")
        inputs = ModelInputs(
            sample_ids=[f"batch row {i}" for i in range(input_ids.shape[0])],
            input_ids=input_ids,
            attention_mask=mask if mask is not None else input_ids.new_ones(input_ids.shape),
            mm_token_type_ids=kwargs.get("mm_token_type_ids"),
            image_grid_thw=kwargs.get("image_grid_thw"),
            video_grid_thw=kwargs.get("video_grid_thw"),
        )
        self.backend.check_inputs(inputs)

    def _features(self, kwargs: dict[str, Any], shared: dict[str, tuple[int, ...]]) -> dict[str, Any]:
        """The model's ``mm_encoder_outputs`` from one tower call on the distinct items of both
        modalities (their pixels popped from ``kwargs``): item ``i`` of a modality gets the embeddings
        of distinct item ``shared[field][i]`` (every item its own where ``shared`` lacks the field)."""
        import torch

        parts = []  # (modality, distinct pixels, distinct grids, the distinct item of each item, grids)
        for modality, field, grid_key in _MODALITIES:
            pixels = kwargs.pop(field, None)
            if pixels is None:
                continue
            grid = kwargs[grid_key]
            items = shared.get(field) or tuple(range(grid.shape[0]))
            firsts: dict[int, int] = {}
            for i, d in enumerate(items):
                firsts.setdefault(d, i)
            if len(items) != grid.shape[0] or sorted(firsts) != list(range(len(firsts))):
                raise ValueError(
                    f"vision sync: {len(items)} shared {modality} items for {grid.shape[0]} grids"
                )
            parts.append((modality, pixels, grid[[firsts[d] for d in range(len(firsts))]], items, grid))
        if not parts:  # no pixels in this forward: nothing to encode
            return {}
        grids = torch.cat([p[2] for p in parts])
        counts = grids.prod(-1).tolist()
        pieces = [p[1].to(self.visual.dtype) for p in parts]
        if sum(counts) != sum(x.shape[0] for x in pieces):
            raise ValueError(
                f"vision sync: {sum(x.shape[0] for x in pieces)} patches for grids of {sum(counts)}"
            )
        if self._tower is not None:
            keys = self._unit_keys(kwargs.get("input_ids"), parts)
            merge = self.backend.merge_size
            kind, pooled, deepstack = encode_sharded(
                self.visual, pieces, grids.tolist(), keys, self._tower, merge, self._dummy_output
            )
        else:
            out = self.visual(joined(pieces), grid_thw=grids)
            kind, pooled = type(out), out.pooler_output
            deepstack = list(getattr(out, "deepstack_features", None) or [])
        sizes = [c // self.backend.merge_size**2 for c in counts]
        split = torch.split(pooled, sizes)
        split_deep = [torch.split(f, sizes) for f in deepstack]
        result: dict[str, Any] = {}
        offset = 0
        for modality, _, grid, items, _ in parts:
            pick = [offset + d for d in items]  # an embedding used by several rows: autograd sums them
            fields: dict[str, Any] = {"pooler_output": tuple(split[i] for i in pick)}
            if split_deep:
                fields["deepstack_features"] = [tuple(f[i] for i in pick) for f in split_deep]
            result[modality] = kind(**fields)
            offset += grid.shape[0]
        return result

    def _unit_keys(self, input_ids: torch.Tensor | None, parts: list[Any]) -> list[list[int]]:
        """Each distinct item's temporal patches' first row positions (:func:`unit_keys`), in the
        tower's order of items; without ``input_ids``, the tower's order itself."""
        out: list[list[int]] = []
        for modality, _, distinct, items, grid in parts:
            if input_ids is None:
                for t, _, _ in distinct.tolist():
                    start = out[-1][-1] + 1 if out else 0
                    out.append(list(range(start, start + t)))
                continue
            rows = (input_ids.flatten() == self.backend.token_ids[modality]).nonzero().flatten().tolist()
            keys = unit_keys(rows, grid.tolist(), items, self.backend.merge_size)
            out += [keys[d] for d in range(distinct.shape[0])]
        return out

    def _dummy_output(self) -> Any:
        """The tower on zero patches (grid :data:`_DUMMY_GRID`)."""
        import torch

        config = self.visual.config
        patch_dim = config.in_channels * config.temporal_patch_size * config.patch_size**2
        t, h, w = _DUMMY_GRID
        param = next(self.visual.parameters())
        pixels = torch.zeros(t * h * w, patch_dim, dtype=self.visual.dtype, device=param.device)
        grid = torch.tensor([_DUMMY_GRID], dtype=torch.long, device=param.device)
        return self.visual(pixels, grid_thw=grid)

    def _dummy_term(self) -> torch.Tensor:
        """``0 · mean`` of a vision forward on zero patches (and of its DeepStack outputs)."""
        out = self._dummy_output()
        term = out.pooler_output.float().mean()
        for feature in getattr(out, "deepstack_features", None) or []:
            term = term + feature.float().mean()
        self.dummy_calls += 1
        return term * 0.0


@contextmanager
def _hooks(model: Any, backend: _Backend) -> Iterator[QwenVisionSync]:
    """The vision hooks installed on ``model``, or hooks installed for the while (no dummy)."""
    installed = _INSTALLED.get(getattr(model, "model", model))
    sync = installed or QwenVisionSync(model, backend=backend)
    if installed is None:
        sync.dummy = False
    try:
        yield sync
    finally:
        if installed is None:
            sync.remove()


@contextmanager
def vision_once(model: Any, backend: _Backend, items: dict[str, tuple[int, ...]]) -> Iterator[None]:
    """The tower once per distinct item (``items``: :attr:`ModelInputs.shared_items`) in the forwards
    of ``model`` within, through its installed hooks (or hooks installed for the while, no dummy)."""
    with _hooks(model, backend) as sync, sync.sharing(items):
        yield


@contextmanager
def tower_sharded(model: Any, backend: _Backend, shard: Shard) -> Iterator[None]:
    """The tower of ``model`` sharded by ``shard`` in the forwards within, through its installed
    hooks (or hooks installed for the while, no dummy)."""
    with _hooks(model, backend) as sync, sync.sharding_tower(shard):
        yield


class QwenVisionHooks:
    """The Qwen-VL backend's vision-tower hooks (a base of :class:`~videorl_models.qwen.QwenVLBackend`)."""

    def install_vision_sync(self: Any, model: Any) -> QwenVisionSync:
        """One vision-tower call per forward: real images and videos together, else a zero-weighted dummy."""
        return QwenVisionSync(model, backend=self)

    def vision_once(self: Any, model: Any, inputs: ModelInputs) -> AbstractContextManager[None]:
        """Forwards within run the tower once per distinct item (:attr:`ModelInputs.shared_items`)."""
        return vision_once(model, self, inputs.shared_items)

    def sequence_parallel_vision(self: Any, model: Any, shard: Shard) -> AbstractContextManager[None]:
        """Sequence-parallel forwards within run the tower on this rank's share of the temporal
        patches (``shard``: core's ``TowerShard``), the embeddings all-gathered."""
        return tower_sharded(model, self, shard)
