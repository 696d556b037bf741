"""Parity between the trainer and the rollout engine: do both sides see the same prompt and video?

Two users: ``videorl models check MODEL`` builds probe samples (videos of several lengths, rates and
a clip range, an image, text, two videos in one prompt), runs them through the trainer's path
(``backend.encode`` → ``backend.collate`` → the teacher-forced forward) and through the rollout
engine the run would use (:func:`videorl.rollout.factory.make_engine`), and compares per sample:

- ``prompt_ids``: the ids the engine reports having used against the framework's tokenisation;
- ``placeholders``: the visual placeholder spans of the prompt, and the media items the engine request
  carries for them;
- ``grids``: the trainer's visual grids against those the checkpoint's processor builds from the engine
  request (its frames and processor settings);
- ``frame_metadata``: the frame indices, source fps, frame count and duration the trainer used against
  what the engine request carries (a missing ``fps`` makes the engine assume one);
- ``positions``: the rotary positions the training forward uses (read at the language model's input)
  against the rule the engine computes (``backend.rope_positions``, where the backend defines one);
- ``greedy``: the engine's greedy continuation against the trainer's argmax on the same prefix;
- ``logprobs``: per-token log-probs of one seeded response: the engine's against the teacher-forced
  trainer's (temperature 1, forbidden ids masked, as in training).

The other user is the training loop's first-step check (``rollout.parity_check``):
:func:`first_step_check` compares, per modality, the engine's log-probs of the real batch with the
actor's and stops the run (or warns) beyond the tolerance. The comparisons here are pure functions of
lists and tensors, so they are tested without a model.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from videorl.actor.parity import FAIL, NA, PASS, CheckResult, ParityReport, Tolerance
from videorl.diagnostics.comparisons import (
    _count_text,
    compare_frame_metadata,
    compare_greedy,
    compare_grids,
    compare_ids,
    compare_items,
    compare_logprobs,
    compare_positions,
    ids_result_from_error,
    logprob_cause,
    visual_spans,
)
from videorl.errors import AlignmentError, DataError
from videorl.generation import capabilities_of
from videorl.model_inputs import response_logprobs
from videorl.rollout import SamplingParams

if TYPE_CHECKING:
    import torch

    from videorl.backend import ModelBackend, PromptInput, VisualBudget
    from videorl.model_inputs import EncodedPrompt, ModelInputs
    from videorl.rollout import RolloutEngine

__all__ = ["CHECKS", "probe_prompts", "run_check"]

log = logging.getLogger("videorl.models_check")

CHECKS = ("prompt_ids", "placeholders", "grids", "frame_metadata", "positions", "greedy", "logprobs")


# --- probe samples ------------------------------------------------------------------------------


@dataclass(frozen=True)
class VideoProbe:
    """A synthetic source video: its rate, length and size, and an optional time range."""

    fps: float
    seconds: float
    width: int
    height: int
    start: float | None = None
    end: float | None = None


#: (name, videos, with an image): videos of several lengths and rates, a clip range, two in one prompt
#: (name, videos, number of images); the images are 224×168, then 168×224 (two grids)
PROBES: tuple[tuple[str, tuple[VideoProbe, ...], int], ...] = (
    ("video-30fps-4s", (VideoProbe(30.0, 4.0, 224, 168),), 0),
    ("video-10fps-1.7s", (VideoProbe(10.0, 1.7, 168, 112),), 0),
    ("video-clip-2-6s", (VideoProbe(24.0, 12.0, 224, 168, start=2.0, end=6.0),), 0),
    # long and small: the time axis outgrows the spatial ones (where rotary rules part)
    ("video-long-lowres", (VideoProbe(30.0, 16.0, 56, 56),), 0),
    ("image", (), 1),
    ("text", (), 0),
    ("two-videos", (VideoProbe(30.0, 4.0, 224, 168), VideoProbe(25.0, 4.0, 168, 224)), 0),
    ("two-images", (), 2),
)


def probe_video(probe: VideoProbe, backend: ModelBackend, budget: VisualBudget, seed: int) -> tuple[Any, Any]:
    """Random frames of ``probe`` sampled and sized as the data path would with ``budget``."""
    import dataclasses

    import numpy as np
    import torch

    from videorl.media import DecodeParams, VideoMetadata
    from videorl.media.sampling import nearest_frames, num_frames
    from videorl.media.sizing import fit_to_budget

    params = dataclasses.replace(
        DecodeParams.from_budget(
            budget, factor=backend.factor, temporal_patch_size=backend.temporal_patch_size
        ),
        start=probe.start,
        end=probe.end,
    )
    total = round(probe.fps * probe.seconds)
    first = 0 if probe.start is None else round(probe.start * probe.fps)
    stop = total if probe.end is None else min(total, round(probe.end * probe.fps))
    duration = (stop - first) / probe.fps
    count = num_frames(stop - first, duration, params)
    indices = [first + int(i) for i in nearest_frames(np.arange(stop - first), count)]
    max_pixels = params.max_pixels
    if params.total_pixels is not None:
        max_pixels = max(
            params.min_pixels, min(max_pixels, params.total_pixels * params.temporal_patch_size // count)
        )
    height, width = fit_to_budget(
        probe.height, probe.width, factor=backend.factor, min_pixels=params.min_pixels, max_pixels=max_pixels
    )
    gen = torch.Generator().manual_seed(seed)
    frames = torch.randint(0, 256, (count, 3, height, width), dtype=torch.uint8, generator=gen)
    extra = {} if probe.start is None else {"clip": [probe.start, probe.end]}
    meta = VideoMetadata(
        source_fps=probe.fps,
        total_frames=total,
        duration=duration,
        frame_indices=tuple(indices),
        timestamps=tuple(i / probe.fps for i in indices),
        source_width=probe.width,
        source_height=probe.height,
        width=width,
        height=height,
        extra=extra,
    )
    return frames, meta


def probe_prompts(backend: ModelBackend, budget: VisualBudget) -> list[PromptInput]:
    """The probe samples of :data:`PROBES`, with frames and images sized by ``budget``."""
    import torch

    from videorl.backend import PromptInput
    from videorl.media.sizing import fit_to_budget

    prompts = []
    for seed, (name, videos, n_images) in enumerate(PROBES):
        clips = [probe_video(v, backend, budget, seed * 10 + i) for i, v in enumerate(videos)]
        images = []
        for i in range(n_images):
            h, w = fit_to_budget(
                (168, 224)[i % 2],
                (224, 168)[i % 2],
                factor=backend.factor,
                min_pixels=budget.image_min_pixels,
                max_pixels=budget.image_max_pixels,
            )
            images.append(
                torch.randint(
                    0,
                    256,
                    (3, h, w),
                    dtype=torch.uint8,
                    generator=torch.Generator().manual_seed(seed * 10 + i),
                )
            )
        text = (
            "What happens in the video? Answer with one letter."
            if clips
            else ("What colour is the square?" if images else "Which direction does the object move?")
        )
        prompts.append(PromptInput(name, text, videos=clips, images=images))
    return prompts


# --- the two sides ------------------------------------------------------------------------------


@dataclass
class TrainerSide:
    """The trainer's view of one teacher-forced response: log-probs, argmax tokens and their margin
    over the response's own tokens, and the rotary positions the language model received."""

    logprobs: list[float]
    argmax: list[int]
    margins: list[float]
    positions: torch.Tensor | None  # A×L of the row (axes first); None: the model takes 1-D positions


def teacher_forced(
    model: Any,
    backend: ModelBackend,
    encoded: Sequence[EncodedPrompt],
    responses: Sequence[Sequence[int]],
    compute_dtype: torch.dtype | None,
) -> tuple[list[TrainerSide], ModelInputs]:
    """The training forward (``backend.collate`` with responses, autocast in ``compute_dtype`` over the
    stored weights, forbidden ids masked) of ``encoded`` with ``responses``."""
    import torch

    param = next(model.parameters())
    inputs = backend.collate(encoded, responses).to(device=param.device, dtype=param.dtype)
    seen: list[Any] = []
    language_model = getattr(getattr(model, "model", model), "language_model", None)
    handle = None
    if language_model is not None:
        handle = language_model.register_forward_pre_hook(
            lambda _m, _a, kwargs: seen.append(kwargs.get("position_ids")), with_kwargs=True
        )
    mixed = compute_dtype is not None and compute_dtype != param.dtype
    try:
        with torch.no_grad(), torch.autocast(param.device.type, dtype=compute_dtype, enabled=mixed):
            logits = model(**inputs.model_kwargs()).logits
    finally:
        if handle is not None:
            handle.remove()
    forbidden = sorted(backend.forbidden_token_ids())
    chosen = response_logprobs(logits, inputs, forbidden=forbidden).float().cpu()
    rwidth = chosen.shape[1]
    steps = logits[:, -(rwidth + 1) : -1].float()
    if forbidden:
        steps[..., [i for i in forbidden if i < steps.shape[-1]]] = float("-inf")
    best = torch.log_softmax(steps, dim=-1).max(dim=-1)
    positions = seen[0] if seen and isinstance(seen[0], torch.Tensor) and seen[0].dim() == 3 else None
    if positions is not None and positions.shape[0] == 4:  # Qwen3: text positions first, then the 3 axes
        positions = positions[1:]
    out = []
    assert inputs.response_mask is not None
    for row, response in enumerate(responses):
        n = len(response)
        keep = inputs.attention_mask[row].bool().cpu()
        out.append(
            TrainerSide(
                logprobs=chosen[row, :n].tolist(),
                argmax=[int(t) for t in best.indices[row, :n].tolist()],
                margins=(best.values[row, :n].cpu() - chosen[row, :n]).tolist(),
                positions=None if positions is None else positions[:, row].cpu()[:, keep],
            )
        )
    return out, inputs


def engine_rope(backend: ModelBackend, inputs: ModelInputs) -> torch.Tensor | None:
    """The engine's rotary positions of ``inputs`` (``3×B×L``) from the backend's optional
    ``rope_positions``; None for a backend without 3-D positions."""
    rule = getattr(backend, "rope_positions", None)
    return None if rule is None else rule(inputs.to(device="cpu"))


def request_grids(backend: ModelBackend, request: Any) -> tuple[list[Any] | None, str]:
    """The grids the checkpoint's processor builds from an engine request (its frames, metadata and
    processor settings), as an engine that runs the HF processor does; ``(None, why)`` when unknown."""
    data = request.multi_modal_data
    if not data:
        return [], ""
    grids: list[Any] = []
    try:
        from transformers.video_utils import VideoMetadata as HFVideoMetadata

        processor = backend.processor
        kwargs = dict(request.mm_processor_kwargs)
        if data.get("image"):
            image_kwargs = {k: v for k, v in kwargs.items() if k != "do_sample_frames"}  # a video setting
            out = processor.image_processor(images=list(data["image"]), return_tensors="pt", **image_kwargs)
            if "image_grid_thw" not in out:
                return None, "the processor reports no image grids"
            grids += [tuple(int(x) for x in g) for g in out["image_grid_thw"].tolist()]
        if data.get("video"):
            items = [v if isinstance(v, tuple) else (v, None) for v in data["video"]]
            names = set(HFVideoMetadata.__dataclass_fields__)
            metas = [
                None if m is None else HFVideoMetadata(**{k: v for k, v in m.items() if k in names})
                for _, m in items
            ]
            extra = {"video_metadata": metas} if any(m is not None for m in metas) else {}
            out = processor.video_processor(
                videos=[f for f, _ in items], return_tensors="pt", **kwargs, **extra
            )
            if "video_grid_thw" not in out:
                return None, "the processor reports no video grids"
            grids += [tuple(int(x) for x in g) for g in out["video_grid_thw"].tolist()]
    except Exception as exc:  # any processor's failure only makes the grids unknown; the ids still tell
        return None, f"the checkpoint's processor could not process the engine request: {exc}"
    return grids, ""


def request_metadata(request: Any) -> list[dict[str, Any] | None]:
    """The frame metadata an engine request carries for each video (None: frames without metadata)."""
    return [v[1] if isinstance(v, tuple) else None for v in request.multi_modal_data.get("video", [])]


# --- models check -------------------------------------------------------------------------------


def _encode_failure(sample: str, error: Exception) -> CheckResult:
    """A sample the trainer's path rejects: the check its message concerns, with that message."""
    text = str(error)
    if isinstance(error, DataError):
        return CheckResult(sample, "encode", NA, cause=f"the backend does not take this sample: {text}")
    if "grid" in text:
        return CheckResult(sample, "grids", FAIL, cause=text)
    if "placeholder" in text:
        return CheckResult(sample, "placeholders", FAIL, cause=text)
    return CheckResult(sample, "prompt_ids", FAIL, cause=text)


def run_check(
    backend: ModelBackend,
    engine: RolloutEngine,
    model: Any,
    *,
    engine_name: str,
    dtype: str,
    tolerance: Tolerance,
    prompts: Sequence[PromptInput],
    compute_dtype: torch.dtype | None = None,
    model_name: str = "",
    greedy_tokens: int = 4,
    response_tokens: int = 8,
    seed: int = 0,
) -> ParityReport:
    """Compare the trainer's path (``model``, the stored weights, autocast in ``compute_dtype``) with
    ``engine`` on ``prompts``; the engine receives what training sends it (``backend.rollout_request``
    or ``backend.collate``, as its :class:`~videorl.generation.EngineCapabilities` declare)."""

    report = ParityReport(model_name or str(getattr(backend, "path", "")), engine_name, dtype, tolerance)
    uses_requests = capabilities_of(engine).request_format == "request"
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=greedy_tokens)
    sampled = SamplingParams(n=1, temperature=1.0, max_tokens=response_tokens, seed=seed)
    kept: list[tuple[EncodedPrompt, list[float], list[int]]] = []  # encoded, trainer log-probs, response
    for prompt in prompts:
        sample = prompt.sample_id
        try:
            encoded = backend.encode(prompt)
        except (AlignmentError, DataError) as exc:
            report.add(_encode_failure(sample, exc))
            continue
        results = _structure(backend, encoded, sample, uses_requests)
        try:
            [[g]] = engine.generate([encoded], greedy)
            [[s]] = engine.generate([encoded], sampled)
            results.insert(
                0, compare_ids(sample, encoded.prompt_ids, backend.collate([encoded]).prompt_ids(0))
            )
        except AlignmentError as exc:
            results.insert(0, ids_result_from_error(sample, exc))
            report.results += results
            continue
        except Exception as exc:  # the engine rejected the request: that is the finding
            cause = f"the engine failed on this request: {type(exc).__name__}: {exc}"
            results.insert(0, CheckResult(sample, "engine", FAIL, cause=cause))
            report.results += results
            continue
        ts_logprobs = _compare_responses(
            results, sample, backend, model, encoded, (g, s), compute_dtype, tolerance
        )
        report.results += results
        kept.append((encoded, ts_logprobs, s.token_ids))
    if len(kept) > 1:
        report.add(_mixed_batch(backend, model, kept, compute_dtype, tolerance))
    return report


def _compare_responses(
    results: list[CheckResult],
    sample: str,
    backend: ModelBackend,
    model: Any,
    encoded: EncodedPrompt,
    responses: tuple[Any, Any],
    compute_dtype: torch.dtype | None,
    tolerance: Tolerance,
) -> list[float]:
    """Teacher-force the engine's greedy and sampled responses through the trainer's path and append
    the positions, greedy and log-prob checks to ``results``; return the trainer's sampled log-probs."""
    greedy, sampled = responses
    (tg, ts), inputs = teacher_forced(
        model, backend, [encoded, encoded], [greedy.token_ids, sampled.token_ids], compute_dtype
    )
    spans = visual_spans(encoded.mm_token_type_ids or [])
    reference = engine_rope(backend, inputs)
    results.append(
        compare_positions(
            sample,
            tg.positions,
            None if reference is None else reference[:, 0][:, inputs.attention_mask[0].bool()],
            spans,
            "the language model received no 3-D positions"
            if tg.positions is None
            else "the backend defines no rope_positions",
        )
    )
    results.append(compare_greedy(sample, greedy.token_ids, tg.argmax, tg.margins, tolerance.token))
    results.append(
        compare_logprobs(
            sample,
            sampled.logprobs,
            ts.logprobs,
            tolerance.token,
            logprob_cause(results),
            sampled.token_ids,
        )
    )
    return ts.logprobs


def _structure(
    backend: ModelBackend, encoded: EncodedPrompt, sample: str, uses_requests: bool
) -> list[CheckResult]:
    """The checks of what the engine receives: placeholders, grids, frame metadata."""
    prompt = encoded.prompt
    grids = [*encoded.image_grid_thw, *encoded.video_grid_thw]
    spans = visual_spans(encoded.mm_token_type_ids or [])
    span_text = (
        f"{len(spans)} span(s), {sum(s[2] for s in spans)} tokens"
        if spans
        else _count_text({"video": len(prompt.videos), "image": len(prompt.images)})
    )
    expected = {"video": len(prompt.videos), "image": len(prompt.images)}
    if not uses_requests:
        why = "the hf engine generates from the trainer's own inputs"
        return [
            CheckResult(sample, "placeholders", PASS, trainer=span_text, engine="same inputs"),
            CheckResult(sample, "grids", PASS if grids else NA, trainer=grids or None, engine="same inputs"),
            CheckResult(sample, "frame_metadata", NA, cause=why if prompt.videos else "no video"),
        ]
    request = backend.rollout_request(encoded)
    carried = {k: len(v) for k, v in request.multi_modal_data.items()}
    engine_grids, why = request_grids(backend, request)
    trainer_meta = [meta.to_hf_dict() for _, meta in prompt.videos]
    return [
        compare_items(sample, expected, carried, span_text),
        compare_grids(sample, grids, engine_grids, why)
        if grids or engine_grids
        else CheckResult(sample, "grids", NA, cause="no media"),
        compare_frame_metadata(sample, trainer_meta, request_metadata(request)),
    ]


def _mixed_batch(
    backend: ModelBackend,
    model: Any,
    kept: Sequence[tuple[EncodedPrompt, list[float], list[int]]],  # encoded, trainer log-probs, response
    compute_dtype: torch.dtype | None,
    tolerance: Tolerance,
) -> CheckResult:
    """All probes in one left-padded batch on the trainer's side: its log-probs must equal the
    single-sample ones (left padding and batching change nothing; the engine batches as it likes)."""
    encoded = [k[0] for k in kept]
    try:
        sides, _ = teacher_forced(model, backend, encoded, [k[2] for k in kept], compute_dtype)
    except DataError as exc:
        return CheckResult(
            "mixed-batch", "logprobs", NA, cause=f"the backend does not batch these samples: {exc}"
        )
    for (enc, single, _), side in zip(kept, sides):
        result = compare_logprobs(enc.sample_id, single, side.logprobs, tolerance.token)
        if result.failed:
            result.sample, result.cause = (
                f"mixed-batch:{enc.sample_id}",
                "batching (left padding) changes the " + ("trainer's log-probs: " + result.cause),
            )
            return result
    return CheckResult(
        "mixed-batch", "logprobs", PASS, trainer=f"{len(kept)} samples in one batch", engine="same"
    )
