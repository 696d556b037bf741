"""Exactly one vision-tower forward per model forward, on every rank, at the same point.

Under FSDP every rank must gather and reduce the same parameters in the same order. Three hooks on
a Qwen-VL model make the vision tower run exactly once per forward whatever the micro-batch holds:

- before the inner model runs, the batch is checked (placeholders vs grids vs ``mm_token_type_ids``),
  and when it holds images *and* videos they go through the tower in one call (split back into the
  model's ``mm_encoder_outputs``), instead of two calls a video-only rank would not make;
- when the batch has no pixels at all, a zero-weighted dummy forward (16 zero patches, grid 1×4×4)
  runs just before the language model — the point where the real features are consumed — and
  ``0 · mean`` of its outputs (the DeepStack outputs too, for Qwen3-VL) is added to the input
  embeddings, so every vision parameter receives a (zero) gradient.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from videorl.api import ModelInputs

if TYPE_CHECKING:
    import torch

__all__ = ["QwenVisionSync"]

_DUMMY_GRID = (1, 4, 4)


class _Backend(Protocol):
    """What the hooks need of the Qwen-VL backend (a protocol, so this module need not import it)."""

    @property
    def merge_size(self) -> int: ...

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
        self._handles = [
            inner.register_forward_pre_hook(self._before_model, with_kwargs=True),
            self.visual.register_forward_hook(self._after_visual),
            inner.language_model.register_forward_pre_hook(self._before_language_model, with_kwargs=True),
        ]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- hooks -----------------------------------------------------------------------------------

    def _after_visual(self, module: Any, args: Any, output: Any) -> None:
        self._visual_ran = True

    def _before_model(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        self._visual_ran = False
        images, videos = kwargs.get("pixel_values"), kwargs.get("pixel_values_videos")
        if (images is not None or videos is not None) and kwargs.get("input_ids") is not None:
            self._check(kwargs)
        if images is not None and videos is not None:
            kwargs = dict(kwargs)
            kwargs["mm_encoder_outputs"] = self._joint_features(
                kwargs.pop("pixel_values"),
                kwargs["image_grid_thw"],
                kwargs.pop("pixel_values_videos"),
                kwargs["video_grid_thw"],
            )
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

    def _joint_features(
        self, images: torch.Tensor, image_grid: torch.Tensor, videos: torch.Tensor, video_grid: torch.Tensor
    ) -> dict[str, Any]:
        import torch

        dtype = self.visual.dtype
        out = self.visual(
            torch.cat([images.to(dtype), videos.to(dtype)]), grid_thw=torch.cat([image_grid, video_grid])
        )
        merge = self.backend.merge_size**2
        sizes = (torch.cat([image_grid, video_grid]).prod(-1) // merge).tolist()
        n_images = image_grid.shape[0]
        pooled = torch.split(out.pooler_output, sizes)
        deepstack = [torch.split(f, sizes) for f in getattr(out, "deepstack_features", None) or []]

        def part(sl: slice) -> Any:
            fields: dict[str, Any] = {"pooler_output": pooled[sl]}
            if deepstack:
                fields["deepstack_features"] = [f[sl] for f in deepstack]
            return type(out)(**fields)

        return {"image": part(slice(0, n_images)), "video": part(slice(n_images, None))}

    def _dummy_term(self) -> torch.Tensor:
        """``0 · mean`` of a vision forward on zero patches (and of its DeepStack outputs)."""
        import torch

        config = self.visual.config
        patch_dim = config.in_channels * config.temporal_patch_size * config.patch_size**2
        t, h, w = _DUMMY_GRID
        param = next(self.visual.parameters())
        pixels = torch.zeros(t * h * w, patch_dim, dtype=self.visual.dtype, device=param.device)
        grid = torch.tensor([_DUMMY_GRID], dtype=torch.long, device=param.device)
        out = self.visual(pixels, grid_thw=grid)
        term = out.pooler_output.float().mean()
        for feature in getattr(out, "deepstack_features", None) or []:
            term = term + feature.float().mean()
        self.dummy_calls += 1
        return term * 0.0
