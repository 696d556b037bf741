"""The Qwen-VL backend shared by every family; each family module sets its geometry and quirks.

A prompt is rendered with the checkpoint's chat template (media placeholders before the text),
tokenised once, and each placeholder is expanded at the token level from the grids the frame shapes
imply — the way vLLM expands it — so the prompt length is known before any pixel is processed and
the rollout engine reproduces the same ids. Pixels are then processed by the checkpoint's own image
and video processors with resizing and frame sampling off; their grids must equal the ones the
prompt was expanded for, and the placeholders must equal the features, or an ``AlignmentError``
names the sample.

Torch and transformers are imported inside methods: importing this module is cheap.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from videorl.api import (
    AlignmentError,
    ConfigError,
    DataError,
    EncodedPrompt,
    ModelInputs,
    PackedInputs,
    PixelNorm,
    RolloutRequest,
    VisualBudget,
    check_alignment,
    check_batch_alignment,
    check_frames,
    check_image,
    check_response_tokens,
    collate_encoded,
    image_grid,
    install_packed_sdpa,
    mm_token_types,
    pack_model_inputs,
    video_grid,
)
from videorl_models.vision_sync import QwenVisionHooks

if TYPE_CHECKING:
    import torch

    from videorl.api import PromptInput, VideoMetadata

__all__ = ["QwenVLBackend"]

#: marker -> (token, the config.json key holding its id)
_MARKERS = {
    "image": ("<|image_pad|>", "image_token_id"),
    "video": ("<|video_pad|>", "video_token_id"),
    "vision_start": ("<|vision_start|>", "vision_start_token_id"),
    "vision_end": ("<|vision_end|>", "vision_end_token_id"),
}


#: the system turn Qwen-VL's chat templates write when a conversation has none
DEFAULT_SYSTEM = "You are a helpful assistant."


def tools_block(tools: Sequence[Mapping[str, Any]]) -> str:
    """What Qwen's chat templates append to the system turn for ``tools=`` (Qwen2.5's and Qwen3's
    ``# Tools`` section, each tool's spec as one JSON line in ``<tools>``), for templates that ignore
    ``tools=``: the policy is offered its tools in the format the Qwen models were tuned on."""
    lines = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
        f"{lines}\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


class QwenVLBackend(QwenVisionHooks):
    """A Qwen-VL family backend (see :class:`videorl.api.ModelBackend`); its vision-tower hooks are
    :class:`~videorl_models.vision_sync.QwenVisionHooks`."""

    family: ClassVar[str]
    model_types: ClassVar[tuple[str, ...]]
    patch_size: ClassVar[int]
    merge_size: ClassVar[int] = 2
    temporal_patch_size: ClassVar[int] = 2
    #: Qwen2.5-VL: the model takes the seconds per temporal patch (3-D RoPE time axis)
    uses_second_per_grid_ts: ClassVar[bool] = False
    #: Qwen3-VL/3.5: each temporal patch is ``<t seconds><|vision_start|>pads<|vision_end|>``
    timestamped_frames: ClassVar[bool] = False

    factor: ClassVar[int]  # patch_size × merge_size, set for each family class

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.factor = cls.patch_size * cls.merge_size

    def __init__(self, path: str | Path | None = None, *, budget: VisualBudget | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._budget = budget

    @property
    def budget(self) -> VisualBudget:
        return self._budget or VisualBudget.for_factor(self.factor)

    # -- loading ---------------------------------------------------------------------------------

    def _require_path(self) -> Path:
        if self.path is None:
            raise ConfigError(f"{self.family} backend: no checkpoint directory given (Backend(path))")
        return self.path

    @cached_property
    def config(self) -> dict[str, Any]:
        """The checkpoint's ``config.json``, checked against this backend's geometry."""
        path = self._require_path() / "config.json"
        config: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        model_type = config.get("model_type")
        if model_type not in self.model_types:
            raise ConfigError(
                f"{path}: model_type {model_type!r} is not served by the {self.family} backend "
                f"(it serves {', '.join(self.model_types)})"
            )
        vision = config.get("vision_config", {})
        for key, want in (
            ("patch_size", self.patch_size),
            ("spatial_merge_size", self.merge_size),
            ("temporal_patch_size", self.temporal_patch_size),
        ):
            if key in vision and int(vision[key]) != want:
                raise ConfigError(
                    f"{path}: vision_config.{key} is {vision[key]}, but the {self.family} backend "
                    f"assumes {want}; this checkpoint needs a backend of its own"
                )
        return config

    @cached_property
    def processor(self) -> Any:
        """The checkpoint's processor (``AutoProcessor.from_pretrained``), loaded once."""
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(str(self._require_path()))

    @property
    def tokenizer(self) -> Any:
        return self.processor.tokenizer

    def load_model(self, *, dtype: Any = None, device: Any = None) -> Any:
        """The model (``AutoModelForImageTextToText.from_pretrained``), in eval mode. On the ``meta``
        device: the architecture alone, no weight read (for FSDP ranks that receive their shards)."""
        import torch
        from transformers import AutoConfig, AutoModelForImageTextToText

        _ = self.config  # validates model_type and geometry first
        dtype = dtype or torch.float32
        if device is not None and torch.device(device).type == "meta":
            with torch.device("meta"):
                config = AutoConfig.from_pretrained(str(self._require_path()))
                model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
            return self.prepare_model(model).eval()
        model = AutoModelForImageTextToText.from_pretrained(str(self._require_path()), dtype=dtype)
        if device is not None:
            model = model.to(device)
        return self.prepare_model(model).eval()

    def prepare_model(self, model: Any) -> Any:
        """Install the original Qwen 3-D positions (as vLLM computes them) on a loaded model, and
        sdpa that attends within each sequence of a packed row (``actor.padding_free``)."""
        from videorl_models.rope import install_rope_index

        inner = getattr(model, "model", model)
        install_packed_sdpa(getattr(inner, "language_model", inner))
        vision = model.config.vision_config
        install_rope_index(
            model,
            merge_size=self.merge_size,
            split_frames=self.timestamped_frames,
            tokens_per_second=vision.tokens_per_second if self.uses_second_per_grid_ts else None,
        )
        return model

    def rope_positions(self, inputs: ModelInputs) -> torch.Tensor:
        """The 3-D positions (``3×B×L``) the rollout engine computes for ``inputs``: the original rule,
        which :meth:`prepare_model` installs (``videorl models check`` compares the two)."""
        from videorl_models.rope import mrope_positions

        if inputs.mm_token_type_ids is None:
            raise ValueError(
                "rope_positions: these inputs lack mm_token_type_ids (collate them with this backend)"
            )
        tokens_per_second = self.config.get("vision_config", {}).get("tokens_per_second")
        return mrope_positions(
            inputs.input_ids,
            inputs.mm_token_type_ids,
            inputs.image_grid_thw,
            inputs.video_grid_thw,
            inputs.attention_mask,
            inputs.second_per_grid_ts,
            merge_size=self.merge_size,
            tokens_per_second=tokens_per_second if self.uses_second_per_grid_ts else None,
            split_frames=self.timestamped_frames,
        )[0]

    def sequence_parallel_text_model(self, model: Any) -> Any:
        """The decoder stack sequence parallelism shards (``actor.sequence_parallel_size``): it takes
        the merged ``inputs_embeds`` and the packed row's ``4 × 1 × N`` positions by keyword."""
        return getattr(model, "model", model).language_model

    def pack_inputs(self, inputs: ModelInputs) -> PackedInputs:
        """The teacher-forced batch ``inputs`` in one row (``actor.padding_free``): each sequence's 3-D
        positions are those of :meth:`rope_positions` for the padded batch, after the per-sequence
        token counters that mark the boundaries (transformers' ``4 × 1 × N`` packed layout)."""
        return pack_model_inputs(inputs, self.rope_positions(inputs))

    @cached_property
    def token_ids(self) -> dict[str, int]:
        """Placeholder and marker ids; the tokenizer and ``config.json`` must agree on them."""
        vocab = self.tokenizer.get_vocab()
        ids: dict[str, int] = {}
        for key, (token, config_key) in _MARKERS.items():
            if token not in vocab:
                raise ConfigError(f"{self.path}: the tokenizer lacks the Qwen-VL token {token}")
            if config_key in self.config and self.config[config_key] != vocab[token]:
                raise ConfigError(
                    f"{self.path}: config.json says {config_key}={self.config[config_key]} but the tokenizer "
                    f"maps {token} to {vocab[token]}; the tokenizer does not belong to this model"
                )
            ids[key] = vocab[token]
        return ids

    # -- prompt tokens ---------------------------------------------------------------------------

    def _check_media(self, prompt: PromptInput) -> None:
        for i, (frames, meta) in enumerate(prompt.videos):
            check_frames(prompt.sample_id, frames, self.factor, index=i)
            if meta.num_frames != frames.shape[0]:
                raise DataError(
                    f"sample {prompt.sample_id!r}, video {i}: the metadata lists {meta.num_frames} sampled "
                    f"frames but the tensor holds {frames.shape[0]}: they do not belong together"
                )
        for i, image in enumerate(prompt.images):
            check_image(prompt.sample_id, image, self.factor, index=i)

    def _grids(self, prompt: PromptInput) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
        images = [image_grid(img.shape, patch_size=self.patch_size) for img in prompt.images]
        videos = [
            video_grid(frames.shape, patch_size=self.patch_size, temporal_patch_size=self.temporal_patch_size)
            for frames, _ in prompt.videos
        ]
        return images, videos

    def chat_ids(self, prompt: PromptInput) -> list[int]:
        """The prompt rendered with the chat template and tokenised, one placeholder per media item."""
        content: list[dict[str, Any]] = [{"type": "video"} for _ in prompt.videos]
        content += [{"type": "image"} for _ in prompt.images]
        content.append({"type": "text", "text": prompt.text})
        messages: list[dict[str, Any]] = []
        if prompt.system is not None:
            messages.append({"role": "system", "content": prompt.system})
        messages.append({"role": "user", "content": content})
        render = self.tokenizer.apply_chat_template
        text = render(messages, tokenize=False, add_generation_prompt=True)
        if prompt.tools:
            tools = [dict(t) for t in prompt.tools]
            offered = render(messages, tools=tools, tokenize=False, add_generation_prompt=True)
            if offered == text:  # a template that ignores tools= (Qwen2-VL's, Qwen2.5-VL's): Qwen's block
                system = (prompt.system if prompt.system is not None else DEFAULT_SYSTEM) + tools_block(tools)
                user = messages[-1]
                offered = render([{"role": "system", "content": system}, user], tokenize=False,
                                 add_generation_prompt=True)  # fmt: skip
            text = offered
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    def _video_tokens(self, grid: tuple[int, int, int], meta: VideoMetadata) -> list[int]:
        """The expanded tokens of one video (Qwen2/2.5: the pads only)."""
        t, h, w = grid
        return [self.token_ids["video"]] * (t * h * w // self.merge_size**2)

    def _expand(
        self,
        sample_id: str,
        compact: list[int],
        image_grids: Sequence[tuple[int, int, int]],
        video_grids: Sequence[tuple[int, int, int]],
        metas: Sequence[VideoMetadata],
    ) -> tuple[list[int], list[int]]:
        """Expand each placeholder: ``(prompt_ids, engine_prompt_ids)``."""
        image_id, video_id = self.token_ids["image"], self.token_ids["video"]
        for name, token_id, count in (
            ("image", image_id, len(image_grids)),
            ("video", video_id, len(video_grids)),
        ):
            found = compact.count(token_id)
            if found != count:
                raise AlignmentError(
                    f"sample {sample_id!r}: the rendered prompt has {found} {name} placeholder(s) but the "
                    f"sample has {count} {name}(s). Likely cause: the text contains a literal placeholder "
                    "token, or the chat template does not render every media item."
                )
        start, end = self.token_ids["vision_start"], self.token_ids["vision_end"]
        images, videos = iter(image_grids), iter(zip(video_grids, metas))
        expanded: list[int] = []
        engine: list[int] = []
        i = 0
        while i < len(compact):
            tok = compact[i]
            if tok == image_id:
                t, h, w = next(images)
                expanded += [image_id] * (t * h * w // self.merge_size**2)
                engine.append(tok)
            elif tok == video_id:
                grid, meta = next(videos)
                block = self._video_tokens(grid, meta)
                wrapped = (
                    self.timestamped_frames and expanded[-1:] == [start] and compact[i + 1 : i + 2] == [end]
                )
                if wrapped:
                    # Qwen3: the per-frame blocks replace the template's whole <vs><pad><ve>, as vLLM
                    # does when given only the bare pad (and transformers 4.x did); no nesting.
                    expanded.pop()
                    engine.pop()
                    i += 1
                expanded += block
                engine.append(tok)
            else:
                expanded.append(tok)
                engine.append(tok)
            i += 1
        return expanded, engine

    def prompt_tokens(self, prompt: PromptInput) -> tuple[list[int], list[int]]:
        """``(prompt_ids, engine_prompt_ids)`` from the frame shapes alone (no pixel processing)."""
        self._check_media(prompt)
        image_grids, video_grids = self._grids(prompt)
        metas = [meta for _, meta in prompt.videos]
        return self._expand(prompt.sample_id, self.chat_ids(prompt), image_grids, video_grids, metas)

    def prompt_length(self, prompt: PromptInput) -> int:
        return len(self.prompt_tokens(prompt)[0])

    def observation_ids(self, prompt: PromptInput) -> list[int]:
        """A tool's reply (``prompt``: its text and media) as the chat template appends it to a
        conversation whose last assistant turn ended with ``<|im_end|>``: the separator the template
        writes after that token, the tool turn and the next assistant header; one placeholder per item.
        The template renders the conversation before and after the reply; the reply is the difference,
        so earlier turns are never re-rendered. The reply's text may echo model output: it is tokenised
        as plain text, a special token's spelling in it never becoming that token (a placeholder)."""
        hole = "\x00reply\x00"
        content: list[dict[str, Any]] = [{"type": "video"} for _ in prompt.videos]
        content += [{"type": "image"} for _ in prompt.images]
        content.append({"type": "text", "text": hole})
        before = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]
        render = self.tokenizer.apply_chat_template
        head = render(before, tokenize=False, add_generation_prompt=False)
        turn = {"role": "tool", "content": content}
        full = render([*before, turn], tokenize=False, add_generation_prompt=True)
        end = head.rfind("<|im_end|>")
        if end < 0 or not full.startswith(head) or full.count(hole) != 1:
            raise ConfigError(
                f"{self.path}: the chat template re-renders earlier turns when a tool turn follows (or has "
                "no <|im_end|>); a multi-turn rollout needs a template that appends turns"
            )
        left, right = (head[end + len("<|im_end|>") :] + full[len(head) :]).split(hole)
        tokenize = self.tokenizer
        ids: list[int] = tokenize(left, add_special_tokens=False)["input_ids"]
        ids += tokenize(prompt.text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        ids += tokenize(right, add_special_tokens=False)["input_ids"]
        return ids

    def encode_observation(self, prompt: PromptInput) -> EncodedPrompt:
        """A tool's reply encoded as it continues the conversation (:meth:`observation_ids`), its media
        expanded and processed as a prompt's are: positions and grids as if it had been in the prompt."""
        self._check_media(prompt)
        grids = self._grids(prompt)
        metas = [meta for _, meta in prompt.videos]
        ids, engine_ids = self._expand(prompt.sample_id, self.observation_ids(prompt), *grids, metas)
        return self._encoded(prompt, ids, engine_ids, grids)

    # -- pixels ----------------------------------------------------------------------------------

    @staticmethod
    def hf_video_metadata(meta: VideoMetadata) -> Any:
        """The transformers ``VideoMetadata`` for frames sampled as ``meta`` describes."""
        from transformers.video_utils import VideoMetadata as HFVideoMetadata

        return HFVideoMetadata(**meta.to_hf_dict())

    def _processor_kwargs(self) -> dict[str, Any]:
        """Processor settings that forbid resizing and resampling (the data path did both)."""
        return {"do_resize": False, "do_sample_frames": False, "cap_pixels_per_frame": False}

    def pixel_norm(self, processor: Any) -> PixelNorm:
        """The rescale and normalisation ``processor`` (the image or video processor) would apply to its
        patches; the backend runs it without them and they are done on the device (:class:`PixelNorm`)."""
        channels = len(processor.image_mean)
        return PixelNorm(
            mean=tuple(processor.image_mean) if processor.do_normalize else (0.0,) * channels,
            std=tuple(processor.image_std) if processor.do_normalize else (1.0,) * channels,
            rescale=float(processor.rescale_factor) if processor.do_rescale else 1.0,
            columns_per_channel=self.temporal_patch_size * self.patch_size**2,
        )

    def _pixels(self, prompt: PromptInput) -> tuple[dict[str, torch.Tensor], dict[str, PixelNorm]]:
        """The visual tensors, pixels as uint8 patches (``do_rescale`` and ``do_normalize`` off: the
        frames' own values, cut into patches), and how each pixel tensor is normalised on the device."""
        import torch

        visual: dict[str, torch.Tensor] = {}
        norms: dict[str, PixelNorm] = {}
        raw = {"do_rescale": False, "do_normalize": False}
        if prompt.images:
            images = self.processor.image_processor
            out = images(images=list(prompt.images), do_resize=False, return_tensors="pt", **raw)
            visual["pixel_values"] = _uint8(out["pixel_values"], prompt.sample_id)
            visual["image_grid_thw"] = out["image_grid_thw"].long()
            norms["pixel_values"] = self.pixel_norm(images)
        if prompt.videos:
            metas = [self.hf_video_metadata(meta) for _, meta in prompt.videos]
            out = self.processor.video_processor(
                videos=[frames for frames, _ in prompt.videos],
                video_metadata=metas,
                return_tensors="pt",
                **self._processor_kwargs(),
                **raw,
            )
            visual["pixel_values_videos"] = _uint8(out["pixel_values_videos"], prompt.sample_id)
            visual["video_grid_thw"] = out["video_grid_thw"].long()
            norms["pixel_values_videos"] = self.pixel_norm(self.processor.video_processor)
            if self.uses_second_per_grid_ts:
                visual["second_per_grid_ts"] = torch.tensor(
                    [self.temporal_patch_size / m.sampled_fps for m in metas], dtype=torch.float32
                )
        return visual, norms

    def encode(self, prompt: PromptInput) -> EncodedPrompt:
        """Tokenise once, process pixels, and check that grids and placeholders agree."""
        prompt_ids, engine_ids = self.prompt_tokens(prompt)
        return self._encoded(prompt, prompt_ids, engine_ids, self._grids(prompt))

    def _encoded(
        self,
        prompt: PromptInput,
        prompt_ids: list[int],
        engine_ids: list[int],
        grids: tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]],
    ) -> EncodedPrompt:
        """``prompt``'s pixels processed beside its expanded ids (a prompt's, or a tool reply's), checked
        against the ``grids`` the ids were expanded for."""
        visual, norms = self._pixels(prompt)
        image_grids, video_grids = grids
        encoded = EncodedPrompt(
            sample_id=prompt.sample_id,
            prompt_ids=prompt_ids,
            mm_token_type_ids=mm_token_types(prompt_ids, self.token_ids["image"], self.token_ids["video"]),
            visual=visual,
            engine_prompt_ids=engine_ids,
            prompt=prompt,
            pixel_norm=norms,
        )
        for name, want, got in (
            ("image", image_grids, encoded.image_grid_thw),
            ("video", video_grids, encoded.video_grid_thw),
        ):
            if want != got:
                raise AlignmentError(
                    f"sample {prompt.sample_id!r}: the processor produced {name} grid(s) {got} but the "
                    f"prompt was expanded for {want} (from the frame shapes). Likely cause: the processor "
                    "resized or resampled the frames; it must run with do_resize=False, "
                    "do_sample_frames=False."
                )
            check_alignment(
                prompt.sample_id,
                prompt_ids,
                token_id=self.token_ids[name],
                grids=got,
                merge_size=self.merge_size,
                modality=name,
            )
        return encoded

    # -- batches and requests --------------------------------------------------------------------

    def collate(
        self,
        encoded: Sequence[EncodedPrompt],
        responses: Sequence[Sequence[int] | EncodedPrompt] | None = None,
    ) -> ModelInputs:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            raise ConfigError(f"{self.path}: the tokenizer has no pad token; cannot batch prompts")
        if responses is not None:
            forbidden = self.forbidden_token_ids()
            for enc, response in zip(encoded, responses):
                # a response with media (tool replies) holds placeholders by design: its generated
                # tokens were checked at rollout, its placeholders against the grids below
                if not isinstance(response, EncodedPrompt):
                    check_response_tokens(enc.sample_id, response, forbidden)
        inputs = collate_encoded(encoded, pad_token_id=pad, responses=responses)
        self.check_inputs(inputs)
        return inputs

    def check_inputs(self, inputs: ModelInputs) -> None:
        """The strict alignment check of a batch (also run by the vision sync before each forward)."""
        check_batch_alignment(
            inputs,
            image_token_id=self.token_ids["image"],
            video_token_id=self.token_ids["video"],
            merge_size=self.merge_size,
        )

    def rollout_request(self, encoded: EncodedPrompt) -> RolloutRequest:
        """A vLLM request: the compact ids, the frames with their metadata, no resizing or resampling."""
        data: dict[str, list[Any]] = {}
        prompt = encoded.prompt
        if prompt.videos:
            data["video"] = [
                (
                    frames.permute(0, 2, 3, 1).contiguous().numpy(),
                    {**meta.to_hf_dict(), "do_sample_frames": False},
                )
                for frames, meta in prompt.videos
            ]
        if prompt.images:
            data["image"] = [image.permute(1, 2, 0).contiguous().numpy() for image in prompt.images]
        return RolloutRequest(
            sample_id=encoded.sample_id,
            prompt_ids=list(encoded.prompt_ids),
            engine_prompt_ids=list(encoded.engine_prompt_ids),
            multi_modal_data=data,
            mm_processor_kwargs={"do_resize": False, "do_sample_frames": False} if data else {},
            image_grid_thw=encoded.image_grid_thw,
            video_grid_thw=encoded.video_grid_thw,
        )

    @cached_property
    def _forbidden(self) -> frozenset[int]:
        ids = set(self.token_ids.values())
        vision_pad = self.tokenizer.get_vocab().get("<|vision_pad|>")
        if vision_pad is not None:
            ids.add(vision_pad)
        text = self.config.get("text_config", self.config)
        ids.update(range(len(self.tokenizer), int(text.get("vocab_size", len(self.tokenizer)))))
        return frozenset(ids)

    def forbidden_token_ids(self) -> frozenset[int]:
        """Visual placeholders and markers, and the padded-vocabulary ids beyond the tokenizer."""
        return self._forbidden

    def end_of_turn_id(self) -> int:
        """``<|im_end|>``, which ends every turn of the Qwen chat templates."""
        end = self.tokenizer.get_vocab().get("<|im_end|>")
        if end is None:
            raise ConfigError(f"{self.path}: the tokenizer lacks the Qwen chat token <|im_end|>")
        return int(end)

    @classmethod
    def build_tiny(
        cls, out_dir: str | Path, *, model_type: str | None = None, seed: int = 0, width: int = 64
    ) -> Path:
        """Write a tiny random checkpoint of this family (``model_type``: dense or MoE variant)."""
        from videorl_models.tiny import build_tiny

        chosen = model_type or cls.model_types[0]
        if chosen not in cls.model_types:
            raise ConfigError(
                f"the {cls.family} backend has no tiny model of type {chosen!r}; "
                f"choose one of {', '.join(cls.model_types)}"
            )
        return build_tiny(chosen, out_dir, seed=seed, width=width)


def _uint8(patches: torch.Tensor, sample_id: str) -> torch.Tensor:
    """Patches cut from uint8 frames without rescaling, as uint8 (float patches hold the same integers)."""
    import torch

    if patches.dtype == torch.uint8:
        return patches
    exact = patches.to(torch.uint8)
    if not torch.equal(exact.to(patches.dtype), patches):
        raise AlignmentError(
            f"sample {sample_id!r}: the processor changed the frames' values before normalising (not "
            "whole numbers in 0..255); it must run with do_resize=False"
        )
    return exact
