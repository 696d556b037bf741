"""What a model backend receives and produces: one tokenisation per prompt, and what each stage derives.

- :class:`PromptInput`: one prompt as the data path hands it to the backend (text, frames, images);
- :class:`EncodedPrompt`: a prompt tokenised once, its ``mm_token_type_ids`` and processed pixels
  (uint8 patches until the device: :class:`PixelNorm`);
- :class:`RolloutRequest`: what the rollout engine receives for it (plus the ids it must reproduce);
- :class:`ModelInputs`: a left-padded batch for HF ``generate`` or, with responses appended, for the
  teacher-forced training forward.

Torch is imported inside the functions that need it, so importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from videorl.media import VideoMetadata

__all__ = [
    "EncodedPrompt",
    "ModelInputs",
    "PixelNorm",
    "PromptInput",
    "RolloutRequest",
    "collate_encoded",
    "continue_encoded",
    "pinned_upload",
    "response_logprobs",
    "response_stats",
    "token_logprobs",
    "token_stats",
]

_GRID_KEYS = ("image_grid_thw", "video_grid_thw")


def _grids(visual: dict[str, torch.Tensor], key: str) -> list[tuple[int, int, int]]:
    grid = visual.get(key)
    return [] if grid is None else [(int(t), int(h), int(w)) for t, h, w in grid.tolist()]


@dataclass
class PromptInput:
    """One prompt as a backend receives it: the user text and the sample's media.

    ``videos`` hold uint8 ``T×3×H×W`` frame tensors with the :class:`~videorl.media.VideoMetadata`
    that produced them; ``images`` hold uint8 ``3×H×W`` tensors. Heights and widths must already be
    multiples of the backend's factor (the data path resizes them). Media are placed before the text,
    videos first, as in the Qwen-VL recipes. ``tools``: the tools the prompt offers, as chat templates
    take them (``tools=`` of ``apply_chat_template``; :func:`videorl.tools.tool_spec`), which the
    backend renders in the system turn.
    """

    sample_id: str
    text: str
    videos: Sequence[tuple[torch.Tensor, VideoMetadata]] = ()
    images: Sequence[torch.Tensor] = ()
    system: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    tools: Sequence[Mapping[str, Any]] = ()

    @property
    def data_type(self) -> str:
        return "video" if self.videos else "image" if self.images else "text"


@dataclass(frozen=True)
class PixelNorm:
    """How a family's uint8 pixel patches become the model's float pixels, on the device.

    The HF processor rescales (``× rescale``) and normalises (``(x - mean_c) / std_c``) each channel,
    then cuts patches whose last axis is ``channels × columns_per_channel`` values, channel-major.
    The backend keeps the patches uint8 (the processor run without rescale and normalise: the same
    values before the affine step, a quarter of float32's bytes) and :meth:`apply` does the affine
    step where the model runs, as the processor computes it (transformers folds the rescale into
    mean and std: ``(x - mean/rescale) / (std/rescale)`` in float32).
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]
    rescale: float
    columns_per_channel: int

    def apply(self, patches: torch.Tensor) -> torch.Tensor:
        """The float32 pixels of uint8 ``patches`` (``… × channels·columns_per_channel``), on their device."""
        import torch

        if patches.shape[-1] != len(self.mean) * self.columns_per_channel:
            raise ValueError(
                f"PixelNorm: patches of {patches.shape[-1]} values, expected {len(self.mean)} channels × "
                f"{self.columns_per_channel}"
            )
        device = patches.device
        mean = torch.tensor(self.mean, dtype=torch.float32, device=device) * (1.0 / self.rescale)
        std = torch.tensor(self.std, dtype=torch.float32, device=device) * (1.0 / self.rescale)
        cols = self.columns_per_channel
        return (patches.float() - mean.repeat_interleave(cols)) / std.repeat_interleave(cols)


@dataclass
class EncodedPrompt:
    """One prompt, tokenised once by the framework.

    ``prompt_ids`` is the full prompt with every visual placeholder expanded (what the model sees);
    ``engine_prompt_ids`` is the same tokenisation with each visual item collapsed back to its single
    placeholder, for rollout engines that expand placeholders themselves (vLLM); ``visual`` holds the
    family's model tensors (``pixel_values_videos``, ``video_grid_thw``, ``second_per_grid_ts``, ...),
    each indexed by item along its first dimension. ``pixel_norm`` names the visual tensors held as
    uint8 patches on the host and how each becomes float pixels on the device (:class:`PixelNorm`,
    applied by :meth:`ModelInputs.to`).
    """

    sample_id: str
    prompt_ids: list[int]
    mm_token_type_ids: list[int] | None
    visual: dict[str, torch.Tensor]
    engine_prompt_ids: list[int]
    prompt: PromptInput
    pixel_norm: dict[str, PixelNorm] = field(default_factory=dict)

    @property
    def image_grid_thw(self) -> list[tuple[int, int, int]]:
        return _grids(self.visual, "image_grid_thw")

    @property
    def video_grid_thw(self) -> list[tuple[int, int, int]]:
        return _grids(self.visual, "video_grid_thw")

    def __len__(self) -> int:
        return len(self.prompt_ids)


@dataclass
class RolloutRequest:
    """A rollout-engine request for one prompt.

    ``prompt_ids`` and the grids are the framework's (identical to the training inputs); the engine
    receives ``engine_prompt_ids`` with the media and must reproduce ``prompt_ids`` — compare what it
    reports with :func:`videorl.alignment.check_same_prompt`.
    """

    sample_id: str
    prompt_ids: list[int]
    engine_prompt_ids: list[int]
    multi_modal_data: dict[str, list[Any]]
    mm_processor_kwargs: dict[str, Any]
    image_grid_thw: list[tuple[int, int, int]] = field(default_factory=list)
    video_grid_thw: list[tuple[int, int, int]] = field(default_factory=list)

    def vllm_prompt(self) -> dict[str, Any]:
        """The ``TokensPrompt`` dict for ``vllm.LLM.generate``."""
        prompt: dict[str, Any] = {"prompt_token_ids": list(self.engine_prompt_ids)}
        if self.multi_modal_data:
            prompt["multi_modal_data"] = self.multi_modal_data
            prompt["mm_processor_kwargs"] = dict(self.mm_processor_kwargs)
        return prompt


@dataclass
class ModelInputs:
    """A batch for the model: left-padded prompts, optionally followed by right-padded responses.

    Prompts occupy columns ``[0, prompt_width)`` (right-aligned), responses ``[prompt_width, L)``
    (left-aligned, ``response_mask`` marks their real tokens). Visual tensors are concatenated over
    the batch in sample order. ``extra`` holds further family-specific model arguments.
    ``pixel_norm``: the visual tensors still uint8 patches (:class:`PixelNorm`), normalised by :meth:`to`.
    ``lengths``: each row's ``(prompt, response)`` token counts, known on the host when the batch is
    built (:func:`collate_encoded`), so that a device batch is never read back to learn them.
    ``shared_items`` (:func:`videorl.shared_vision.share_prompt_visual`): a pixel field that holds each
    distinct prompt's patches once, mapped to the distinct item each item of the batch uses (one entry
    per row of its grid, in order); empty when every row's pixels are its own.
    """

    sample_ids: list[str]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mm_token_type_ids: torch.Tensor | None = None
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None
    pixel_values_videos: torch.Tensor | None = None
    video_grid_thw: torch.Tensor | None = None
    second_per_grid_ts: torch.Tensor | None = None
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    prompt_width: int = 0
    response_mask: torch.Tensor | None = None
    pixel_norm: dict[str, PixelNorm] = field(default_factory=dict)
    lengths: tuple[tuple[int, int], ...] = ()
    shared_items: dict[str, tuple[int, ...]] = field(default_factory=dict)

    _MODEL_FIELDS = (
        "input_ids",
        "attention_mask",
        "mm_token_type_ids",
        "pixel_values",
        "image_grid_thw",
        "pixel_values_videos",
        "video_grid_thw",
        "second_per_grid_ts",
    )

    def model_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the HF model's ``forward`` / ``generate`` (``None`` fields left out).
        The model never sees uint8 patches: those :meth:`to` has not normalised yet are normalised
        here, where they lie (float32)."""
        kwargs = {k: getattr(self, k) for k in self._MODEL_FIELDS if getattr(self, k) is not None}
        kwargs.update(self.extra)
        for name, norm in self.pixel_norm.items():
            if name in kwargs:
                kwargs[name] = norm.apply(kwargs[name])
        return kwargs

    @property
    def logits_to_keep(self) -> int:
        """The last positions whose logits the response needs (the model's ``logits_to_keep``): the
        response's ``R`` columns and the prompt's last; the prompt's other logits are never used."""
        if self.response_mask is None:
            raise ValueError("logits_to_keep: these inputs have no responses (collate with responses=...)")
        return int(self.response_mask.shape[1]) + 1

    def row_lengths(self) -> tuple[tuple[int, int], ...]:
        """Each row's ``(prompt, response)`` token counts: :attr:`lengths`, or for a batch built
        without them, counted from the masks (a read back from the device where they lie there)."""
        if self.lengths:
            return self.lengths
        width = self.prompt_width
        prompts = self.attention_mask[:, :width].sum(dim=1).tolist()
        responses = self.attention_mask[:, width:].sum(dim=1).tolist()
        return tuple((int(p), int(r)) for p, r in zip(prompts, responses))

    def prompt_ids(self, row: int) -> list[int]:
        """The unpadded prompt ids of ``row`` (what the rollout engine must see)."""
        ids = self.input_ids[row, : self.prompt_width]
        mask = self.attention_mask[row, : self.prompt_width].bool()
        return [int(t) for t in ids[mask].tolist()]

    #: floating inputs that are times, not activations: never cast to a lower compute dtype.
    #: ``second_per_grid_ts`` scales Qwen2.5-VL's temporal positions (``t · tokens_per_second · s``,
    #: truncated); bfloat16 keeps 8 bits of mantissa, so 8.475 s becomes 8.5 and patch 1 lands on
    #: position 17 where the rollout engine, in float32, puts 16.
    FLOAT32_FIELDS = ("second_per_grid_ts",)

    def to(self, device: Any = None, dtype: Any = None) -> ModelInputs:
        """A copy on ``device``; floating visual tensors also cast to ``dtype`` when given (the
        :attr:`FLOAT32_FIELDS` stay float32). Uploads to a CUDA device go through pinned host memory
        without blocking (:func:`pinned_upload`). The uint8 patches named in :attr:`pixel_norm` travel
        as uint8 and are normalised there (float32, then ``dtype``); the copy has no ``pixel_norm``."""
        import torch

        pinned = pinned_upload(device)

        def move(name: str, t: Any) -> Any:
            if not isinstance(t, torch.Tensor):
                return t
            cast = torch.float32 if name in self.FLOAT32_FIELDS else None
            if cast is None and dtype is not None and t.is_floating_point():
                cast = dtype
            if pinned and t.device.type == "cpu":
                t = t.pin_memory()
            return t.to(device=device, dtype=cast, non_blocking=pinned)

        def normalise(name: str, t: Any) -> Any:
            norm = self.pixel_norm.get(name)
            if norm is None or not isinstance(t, torch.Tensor):
                return t
            return norm.apply(t).to(dtype or torch.float32)

        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "pixel_norm"}
        for name, value in values.items():
            if isinstance(value, dict):
                values[name] = {k: normalise(k, move(k, v)) for k, v in value.items()}
            else:
                values[name] = normalise(name, move(name, value))
        return ModelInputs(**values)


def pinned_upload(device: Any) -> bool:
    """Whether host tensors bound for ``device`` are first copied to pinned (page-locked) memory and
    uploaded with ``non_blocking=True``: on CUDA only. A pageable upload is a synchronous staged copy
    that stalls the host for the whole transfer (hundreds of MB of pixels per micro-batch at 128
    frames); from pinned memory the transfer is one DMA queued on the current stream, ordered before
    the kernels that read it, while the host goes on queueing work. PyTorch's pinned-memory allocator
    keeps a block alive until the copies that read it have completed, so the temporary may be
    dropped at once. Not yet run on a GPU (the CPU tests check only that this path is chosen)."""
    import torch

    return device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available()


def continue_encoded(
    base: EncodedPrompt, token_ids: Sequence[int], observation: EncodedPrompt | None = None
) -> EncodedPrompt:
    """``base`` followed by ``token_ids`` (text: the policy's turn) and then by ``observation`` (a tool's
    reply the backend encoded, its media expanded and processed): one prompt, as if tokenised whole.
    Its visual items follow ``base``'s in order (the model consumes grids in token order), and its
    :class:`PromptInput` lists the observation's media after the sample's (an engine's request)."""
    import torch

    ids = [*base.prompt_ids, *token_ids]
    engine = [*base.engine_prompt_ids, *token_ids]
    types = None if base.mm_token_type_ids is None else [*base.mm_token_type_ids, *[0] * len(token_ids)]
    visual, prompt, norms = dict(base.visual), base.prompt, dict(base.pixel_norm)
    if observation is not None:
        ids += observation.prompt_ids
        engine += observation.engine_prompt_ids
        if types is not None:
            types += observation.mm_token_type_ids or [0] * len(observation.prompt_ids)
        for key, value in observation.visual.items():
            visual[key] = torch.cat([visual[key], value]) if key in visual else value
        for key, norm in observation.pixel_norm.items():
            if norms.setdefault(key, norm) != norm:
                raise ValueError(f"continue_encoded: the reply normalises {key} unlike the prompt ({norm})")
        prompt = replace(
            prompt,
            videos=[*prompt.videos, *observation.prompt.videos],
            images=[*prompt.images, *observation.prompt.images],
        )
    return EncodedPrompt(base.sample_id, ids, types, visual, engine, prompt, norms)


def collate_encoded(
    encoded: Sequence[EncodedPrompt],
    *,
    pad_token_id: int,
    responses: Sequence[Sequence[int] | EncodedPrompt] | None = None,
    model_keys: Iterable[str] = ModelInputs._MODEL_FIELDS,
) -> ModelInputs:
    """Left-pad the prompts of ``encoded`` (and right-pad ``responses`` after them) into one batch.

    Visual tensors listed in ``model_keys`` become fields of :class:`ModelInputs`, others go to
    ``extra``; each is concatenated along its first dimension in sample order, a row's prompt items
    before its response's. A response is token ids (text: ``mm_token_type_ids`` 0 over it) or an
    :class:`EncodedPrompt` whose ``prompt_ids`` are the response's tokens with media in them (a
    multi-turn episode's tool replies: :meth:`videorl.episode.Episode.response_input`), its types and
    visual tensors taken along.
    """
    import torch

    if not encoded:
        raise ValueError("collate_encoded: no prompts to batch")
    if responses is not None and len(responses) != len(encoded):
        raise ValueError(f"collate_encoded: {len(encoded)} prompts but {len(responses)} responses")
    width = max(len(e.prompt_ids) for e in encoded)
    media = [r if isinstance(r, EncodedPrompt) else None for r in responses or ()] or [None] * len(encoded)
    resp = [list(r.prompt_ids if isinstance(r, EncodedPrompt) else r) for r in responses or ()]
    resp = resp or [[] for _ in encoded]
    rwidth = max((len(r) for r in resp), default=0)
    batch, total = len(encoded), width + rwidth
    input_ids = torch.full((batch, total), pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch, total), dtype=torch.long)
    with_types = all(e.mm_token_type_ids is not None for e in encoded)
    types = torch.zeros((batch, total), dtype=torch.long) if with_types else None
    for row, (enc, res) in enumerate(zip(encoded, resp)):
        start = width - len(enc.prompt_ids)
        input_ids[row, start:width] = torch.tensor(enc.prompt_ids, dtype=torch.long)
        attention[row, start : width + len(res)] = 1
        if res:
            input_ids[row, width : width + len(res)] = torch.tensor(res, dtype=torch.long)
        if types is not None and enc.mm_token_type_ids is not None:
            types[row, start:width] = torch.tensor(enc.mm_token_type_ids, dtype=torch.long)
        reply = media[row]
        if types is not None and reply is not None and reply.mm_token_type_ids is not None:
            types[row, width : width + len(res)] = torch.tensor(reply.mm_token_type_ids, dtype=torch.long)
    response_mask = attention[:, width:].clone() if responses is not None else None

    rows = [e for pair in zip(encoded, media) for e in pair if e is not None]  # prompt, then its response
    keys = list(dict.fromkeys(k for e in rows for k in e.visual))
    model_keys = set(model_keys)
    values: dict[str, Any] = {}
    extra: dict[str, torch.Tensor] = {}
    norms: dict[str, PixelNorm] = {}
    for e in rows:  # a tool reply's pixels are normalised like a prompt's
        for key, norm in e.pixel_norm.items():
            if norms.setdefault(key, norm) != norm:
                raise ValueError(
                    f"collate_encoded: prompts normalise {key} differently ({norms[key]} and {norm})"
                )
    for key in keys:
        parts = [e.visual[key] for e in rows if key in e.visual]
        tensor = torch.cat(parts, dim=0)
        (values if key in model_keys else extra)[key] = tensor
    return ModelInputs(
        sample_ids=[e.sample_id for e in encoded],
        input_ids=input_ids,
        attention_mask=attention,
        mm_token_type_ids=types,
        extra=extra,
        prompt_width=width,
        response_mask=response_mask,
        pixel_norm=norms,
        lengths=tuple((len(e.prompt_ids), len(r)) for e, r in zip(encoded, resp)),
        **values,
    )


def token_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    *,
    forbidden: Iterable[int] = (),
    temperature: float = 1.0,
) -> torch.Tensor:
    """Log-probabilities of ``targets`` under ``logits`` (``…×V`` and ``…``), in float32.

    ``forbidden`` ids get probability zero before normalising, as the sampler that suppresses them
    sees it. The logits are never modified in place (FSDP2 returns views).
    """
    import torch

    scores = logits.float()
    if temperature != 1.0:
        scores = scores / temperature
    banned = sorted(set(forbidden))
    if banned:
        mask = torch.zeros(scores.shape[-1], dtype=torch.bool, device=scores.device)
        mask[[i for i in banned if i < scores.shape[-1]]] = True
        scores = scores.masked_fill(mask, float("-inf"))
    logp = torch.log_softmax(scores, dim=-1)
    return logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def _response_steps(logits: torch.Tensor, inputs: ModelInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits that predict each response token (``B×R×V``) and those tokens (``B×R``).

    ``logits`` are those of the whole batch (``B×L×V``) or of its last ``inputs.logits_to_keep``
    positions (the model's ``logits_to_keep``): either way the response's predictors are the
    ``R + 1``-th last to the second last positions."""
    if inputs.response_mask is None:
        raise ValueError("response_logprobs: these inputs have no responses (collate with responses=...)")
    width, rwidth = inputs.prompt_width, inputs.response_mask.shape[1]
    if logits.shape[1] < rwidth + 1:
        raise ValueError(f"response_logprobs: {logits.shape[1]} logit positions for {rwidth} response tokens")
    step_logits = logits[:, -(rwidth + 1) : -1]
    targets = inputs.input_ids[:, width : width + rwidth].to(step_logits.device)
    return step_logits, targets


def response_logprobs(
    logits: torch.Tensor, inputs: ModelInputs, *, forbidden: Iterable[int] = (), temperature: float = 1.0
) -> torch.Tensor:
    """Per-token log-probabilities (``B×R``) of the responses in ``inputs`` from a teacher-forced forward.

    ``logits`` are the model's output for ``inputs``: all positions (``B×L×V``) or the last
    ``inputs.logits_to_keep``; padded response positions hold values to be ignored with
    ``inputs.response_mask``.
    """
    step_logits, targets = _response_steps(logits, inputs)
    return token_logprobs(step_logits, targets, forbidden=forbidden, temperature=temperature)


#: response positions whose float32 log-softmax is computed at once (a ``chunk × V`` temporary)
STATS_CHUNK = 1024


def response_stats(
    logits: torch.Tensor,
    inputs: ModelInputs,
    *,
    forbidden: Iterable[int] = (),
    entropy_grad: bool = True,
    chunk: int = STATS_CHUNK,
    head: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities and entropies (both ``B×R``, float32) of the responses in ``inputs``,
    with the values of :func:`response_logprobs` and :func:`videorl.algorithms.formulas.entropy_from_logits`.

    The float32 softmax work runs ``chunk`` positions at a time, each chunk recomputed in the backward
    pass (activation checkpointing) instead of kept: of the response's logits only the model's own
    ``B×R×V`` output stays alive, not the five or so float32 copies a whole-tensor log-softmax and
    entropy keep for the backward (2.5 GB each per 4,096-token row at a 152k vocabulary). Without
    ``entropy_grad`` the entropy is computed without a graph (it is only logged).
    """
    step_logits, targets = _response_steps(logits, inputs)
    return token_stats(
        step_logits, targets, forbidden=forbidden, entropy_grad=entropy_grad, chunk=chunk, head=head
    )


def token_stats(
    step_logits: torch.Tensor,
    targets: torch.Tensor,
    *,
    forbidden: Iterable[int] = (),
    entropy_grad: bool = True,
    chunk: int = STATS_CHUNK,
    head: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`response_stats` on the logits that predict ``targets`` (``B×T×V`` and ``B×T``), e.g. the
    response positions of a packed row (:mod:`videorl.packing`).

    With ``head`` (the LM head), ``step_logits`` are the hidden states that predict ``targets``
    (``B×T×H``) and each chunk's logits are made by ``head`` inside the chunk: the whole ``B×T×V``
    logits never exist, only one chunk's (``chunk × V``), recomputed in the backward pass (20k packed
    response positions at a 152k vocabulary: 6 GB of bf16 logits and as much gradient otherwise)."""
    import torch
    from torch.utils.checkpoint import checkpoint

    vocab = step_logits.shape[-1] if head is None else None
    banned_ids = sorted(i for i in set(forbidden) if vocab is None or i < vocab)
    banned = torch.tensor(banned_ids, dtype=torch.long, device=step_logits.device)

    def stats_of(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = (head(x) if head is not None else x).float()
        if banned.numel():
            z = z.index_fill(-1, banned[banned < z.shape[-1]], float("-inf"))
        logp = torch.log_softmax(z, dim=-1).gather(-1, t.long().unsqueeze(-1)).squeeze(-1)
        # without entropy_grad the entropy is only logged: no graph
        return logp, entropy_from_logits(z if entropy_grad else z.detach())

    # a head's weights may want gradients though its input does not
    grad = torch.is_grad_enabled() and (step_logits.requires_grad or head is not None)
    logps, entropies = [], []
    for start in range(0, step_logits.shape[1], chunk):
        x, t = step_logits[:, start : start + chunk], targets[:, start : start + chunk]
        logp, entropy = checkpoint(stats_of, x, t, use_reentrant=False) if grad else stats_of(x, t)
        logps.append(logp)
        entropies.append(entropy)
    return torch.cat(logps, dim=1), torch.cat(entropies, dim=1)


def mask_logits(logits: torch.Tensor, forbidden_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """New logits with ``-inf`` at ``forbidden_ids`` on the last axis (the input is not modified).

    The same ids are suppressed in sampling, so that sampler and policy define one distribution.
    """
    import torch

    ids = torch.as_tensor(forbidden_ids, dtype=torch.long, device=logits.device).flatten()
    if ids.numel() == 0:
        return logits
    vocab = logits.shape[-1]
    if int(ids.min()) < 0 or int(ids.max()) >= vocab:
        raise ValueError(
            f"forbidden token ids must lie in [0, {vocab}), got min {int(ids.min())} max {int(ids.max())}"
        )
    forbidden = torch.zeros(vocab, dtype=torch.bool, device=logits.device)
    forbidden[ids] = True  # a fresh tensor of ours; logits are untouched
    return logits.masked_fill(forbidden, float("-inf"))


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` over the last axis: ``(..., V) -> (...)``.

    ``H = logsumexp(z) - Σ softmax(z)·z``; masked (``-inf``) entries contribute exactly 0, with finite
    gradients. No in-place op touches ``logits``.
    """
    import torch

    logits = logits.float()
    finite = torch.isfinite(logits)
    probs = torch.softmax(logits, dim=-1)
    safe_logits = torch.where(finite, logits, torch.zeros_like(logits))
    return torch.logsumexp(logits, dim=-1) - (probs * safe_logits).sum(dim=-1)
