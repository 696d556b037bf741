"""Strict alignment: visual placeholder tokens must equal the visual features the grids imply.

Every check raises before a forward, naming the sample, both counts and the likely cause. Nothing
here truncates or pads to make counts agree. Importing this module does not import torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from videorl.errors import AlignmentError, DataError

if TYPE_CHECKING:
    import torch

    from videorl.model_inputs import ModelInputs

__all__ = [
    "MM_TOKEN_TYPES",
    "check_alignment",
    "check_batch_alignment",
    "check_frames",
    "check_image",
    "check_response_tokens",
    "check_same_prompt",
    "image_grid",
    "mm_token_types",
    "video_grid",
    "visual_token_count",
]

#: ``mm_token_type_ids`` values (the HF convention): text, image placeholder, video placeholder
MM_TOKEN_TYPES = {"text": 0, "image": 1, "video": 2}

Grid = Sequence[int]


def visual_token_count(grids: Iterable[Grid], merge_size: int) -> int:
    """Visual features (= placeholder tokens) that ``t×h×w`` patch grids yield after spatial merging."""
    total = 0
    for grid in grids:
        t, h, w = (int(x) for x in grid)
        total += t * h * w // (merge_size * merge_size)
    return total


def video_grid(shape: Sequence[int], *, patch_size: int, temporal_patch_size: int) -> tuple[int, int, int]:
    """The patch grid of ``T×3×H×W`` frames (an odd ``T`` is padded with the last frame)."""
    t, _, h, w = (int(x) for x in shape)
    return (math.ceil(t / temporal_patch_size), h // patch_size, w // patch_size)


def image_grid(shape: Sequence[int], *, patch_size: int) -> tuple[int, int, int]:
    """The patch grid of one ``3×H×W`` image (one temporal patch)."""
    _, h, w = (int(x) for x in shape)
    return (1, h // patch_size, w // patch_size)


def check_frames(sample_id: str, frames: torch.Tensor, factor: int, *, index: int = 0) -> None:
    """Frames must be a uint8 ``T×3×H×W`` tensor with ``T ≥ 1`` and sides multiples of ``factor``."""
    where = f"sample {sample_id!r}, video {index}"
    shape = tuple(getattr(frames, "shape", ()))
    if len(shape) != 4 or shape[1] != 3 or shape[0] < 1:
        raise DataError(f"{where}: frames must be a T×3×H×W tensor with T ≥ 1, got shape {shape}")
    if str(getattr(frames, "dtype", "")) != "torch.uint8":
        raise DataError(f"{where}: frames must be uint8 (as the cache stores them), got {frames.dtype}")
    _check_sides(where, "the frames are", shape[2], shape[3], factor)


def check_image(sample_id: str, image: torch.Tensor, factor: int, *, index: int = 0) -> None:
    """An image must be a uint8 ``3×H×W`` tensor with sides multiples of ``factor``."""
    where = f"sample {sample_id!r}, image {index}"
    shape = tuple(getattr(image, "shape", ()))
    if len(shape) != 3 or shape[0] != 3:
        raise DataError(f"{where}: an image must be a 3×H×W tensor, got shape {shape}")
    if str(getattr(image, "dtype", "")) != "torch.uint8":
        raise DataError(f"{where}: images must be uint8, got {image.dtype}")
    _check_sides(where, "the image is", shape[1], shape[2], factor)


def _check_sides(where: str, what: str, height: int, width: int, factor: int) -> None:
    if height < factor or width < factor or height % factor or width % factor:
        raise DataError(
            f"{where}: {what} {height}×{width} pixels, but this model needs height and width that are "
            f"positive multiples of {factor} (patch × merge). The frames were decoded for another model "
            f"family: rebuild the cache with factor={factor} (the backend's factor), never resize here."
        )


def mm_token_types(input_ids: Sequence[int], image_token_id: int, video_token_id: int) -> list[int]:
    """``mm_token_type_ids`` for a prompt: 1 on image placeholders, 2 on video placeholders, else 0."""
    types = {image_token_id: MM_TOKEN_TYPES["image"], video_token_id: MM_TOKEN_TYPES["video"]}
    return [types.get(int(t), 0) for t in input_ids]


def _cause(tokens: int, features: int) -> str:
    if tokens < features:
        return (
            "the prompt lost placeholder tokens (cut by a length limit or a template that drops the "
            "media marker), or the grid belongs to other, larger frames"
        )
    return (
        "the text contains placeholder tokens of its own (e.g. a sampled <|video_pad|> in a response, or "
        "a literal placeholder in the question), or the frames were resized after tokenising"
    )


def check_alignment(
    sample_id: str,
    input_ids: Sequence[int],
    *,
    token_id: int,
    grids: Sequence[Grid],
    merge_size: int,
    modality: str,
) -> None:
    """Placeholder tokens of one modality in one sequence must equal the features its grids imply."""
    tokens = sum(1 for t in input_ids if int(t) == token_id)
    features = visual_token_count(grids, merge_size)
    if tokens != features:
        raise AlignmentError(
            f"sample {sample_id!r}: {tokens} {modality} placeholder tokens (id {token_id}) but "
            f"{features} {modality} features from grid(s) {[tuple(int(x) for x in g) for g in grids]}. "
            f"Likely cause: {_cause(tokens, features)}."
        )


def check_batch_alignment(
    inputs: ModelInputs,
    *,
    image_token_id: int,
    video_token_id: int,
    merge_size: int,
    require_mm_token_type_ids: bool = True,
) -> None:
    """Check a batch before its forward: per row, placeholders vs the grids consumed in order.

    Grids are assigned to rows in order (each row takes grids until its placeholder count is
    reached), as the model itself does; a row whose count is not met exactly, or grids left over,
    raise :class:`AlignmentError` naming the sample. With ``require_mm_token_type_ids``, a batch with
    visual inputs must carry ``mm_token_type_ids`` that mark exactly the placeholder positions.
    """
    ids = inputs.input_ids.tolist()
    has_visual = inputs.image_grid_thw is not None or inputs.video_grid_thw is not None
    if require_mm_token_type_ids and has_visual:
        if inputs.mm_token_type_ids is None:
            raise AlignmentError(
                f"samples {inputs.sample_ids}: visual inputs without mm_token_type_ids. Qwen-VL models "
                "need them for the 3-D (M-RoPE) positions: Qwen2-VL and Qwen3-VL raise, Qwen2.5-VL "
                "silently computes other positions. Build inputs with the backend's collate()."
            )
        types = inputs.mm_token_type_ids.tolist()
        for row, (row_ids, row_types) in enumerate(zip(ids, types)):
            expected = mm_token_types(row_ids, image_token_id, video_token_id)
            if [int(t) for t in row_types] != expected:
                bad = next(i for i, (a, b) in enumerate(zip(row_types, expected)) if int(a) != b)
                raise AlignmentError(
                    f"sample {inputs.sample_ids[row]!r}: mm_token_type_ids[{bad}] is {int(row_types[bad])} "
                    f"but the token there (id {row_ids[bad]}) is of type {expected[bad]}. The types were "
                    "built for other ids: derive them from the same tokenisation."
                )
    for modality, token_id, grid_tensor in (
        ("image", image_token_id, inputs.image_grid_thw),
        ("video", video_token_id, inputs.video_grid_thw),
    ):
        grids: list[list[int]] = [] if grid_tensor is None else grid_tensor.tolist()
        cursor = 0
        for row, row_ids in enumerate(ids):
            tokens = sum(1 for t in row_ids if t == token_id)
            taken: list[list[int]] = []
            features = 0
            while features < tokens and cursor < len(grids):
                taken.append(grids[cursor])
                features += visual_token_count([grids[cursor]], merge_size)
                cursor += 1
            if features != tokens:
                raise AlignmentError(
                    f"sample {inputs.sample_ids[row]!r}: {tokens} {modality} placeholder tokens but the "
                    f"{modality} grids available to it ({taken or 'none'}) imply {features} features. "
                    f"Likely cause: {_cause(tokens, features)}."
                )
        if cursor != len(grids):
            left = grids[cursor:]
            raise AlignmentError(
                f"samples {inputs.sample_ids}: {len(left)} {modality} grid(s) {left} "
                f"({visual_token_count(left, merge_size)} features) have no placeholder tokens in any "
                f"prompt. Likely cause: {_cause(0, 1)}."
            )


def check_response_tokens(sample_id: str, token_ids: Sequence[int], forbidden: Iterable[int]) -> None:
    """A response must not contain any forbidden id (visual placeholders, padded vocabulary)."""
    banned = set(forbidden)
    hits = [(i, int(t)) for i, t in enumerate(token_ids) if int(t) in banned]
    if hits:
        shown = ", ".join(f"id {t} at position {i}" for i, t in hits[:5])
        raise AlignmentError(
            f"sample {sample_id!r}: the response contains {len(hits)} token(s) the policy must never emit "
            f"({shown}{', ...' if len(hits) > 5 else ''}): visual placeholders or padded-vocabulary ids. "
            "A teacher-forced forward would misalign the visual features. Suppress these ids in the "
            "rollout engine (the backend's forbidden_token_ids())."
        )


def check_same_prompt(
    sample_id: str,
    expected: Sequence[int],
    got: Sequence[int],
    *,
    where: str,
    engine_token_map: Mapping[int, int] | None = None,
) -> None:
    """The prompt ids another stage used must be the ids the framework tokenised.

    ``engine_token_map`` (the backend's, :func:`videorl.backend.engine_token_map`) reads the ids an engine
    writes in place of the framework's placeholders (InternVL's ``<video>`` in vLLM where transformers
    scatters at ``<IMG_CONTEXT>``) as the framework's before comparing; any other id must be equal."""
    mapping = engine_token_map or {}
    expected = [int(t) for t in expected]
    got = [mapping.get(int(t), int(t)) for t in got]
    if expected == got:
        return
    first = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
    mapped = " (read through the backend's engine_token_map)" if mapping else ""
    raise AlignmentError(
        f"sample {sample_id!r}: {where} used prompt ids{mapped} that differ from the framework's "
        "tokenisation "
        f"({len(got)} vs {len(expected)} tokens, first difference at position {first}: "
        f"{got[first : first + 4]} vs {expected[first : first + 4]}). Rollout and training must see the same "
        "prompt: check the engine's processor settings (no resampling or resizing) and its version; an "
        "engine that writes other placeholder ids by design needs the backend's engine_token_map."
    )
