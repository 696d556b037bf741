"""The LLaVA-OneVision backend (videos and text), written against ``videorl.api`` only.

A video of ``T`` frames becomes ``T · p² + 1`` ``<video>`` tokens, ``p = ⌈√n / 2⌉`` for a tower of
``n`` patches per frame (2×2 pooling) plus one newline feature. The processor resizes frames to the
tower's square input, so any frame size is accepted. Positions are 1-D: no ``mm_token_type_ids``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.api import (
    AlignmentError,
    ConfigError,
    DataError,
    EncodedPrompt,
    ModelInputs,
    RolloutRequest,
    VisualBudget,
    check_frames,
    check_response_tokens,
    collate_encoded,
)

if TYPE_CHECKING:
    import torch

    from videorl.api import PromptInput

__all__ = ["LlavaOnevisionBackend"]


class LlavaOnevisionBackend:
    """A :class:`videorl.api.ModelBackend` for ``llava_onevision`` checkpoints."""

    family = "llava_onevision"
    model_types = ("llava_onevision",)
    factor = 1  # the processor resizes every frame to the tower's input size
    temporal_patch_size = 1

    def __init__(self, path: str | Path | None = None, *, budget: VisualBudget | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._budget = budget

    @property
    def budget(self) -> VisualBudget:
        return self._budget or VisualBudget.for_factor(14, video_max_frames=32, video_fps=1.0)

    # -- loading ---------------------------------------------------------------------------------

    def _dir(self) -> Path:
        if self.path is None:
            raise ConfigError("llava_onevision backend: no checkpoint directory given (Backend(path))")
        return self.path

    @cached_property
    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = json.loads((self._dir() / "config.json").read_text(encoding="utf-8"))
        if config.get("model_type") not in self.model_types:
            raise ConfigError(
                f"{self._dir()}: model_type {config.get('model_type')!r} is not llava_onevision"
            )
        return config

    @cached_property
    def processor(self) -> Any:
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(str(self._dir()))

    @property
    def tokenizer(self) -> Any:
        return self.processor.tokenizer

    @cached_property
    def video_token_id(self) -> int:
        token_id = int(self.config["video_token_index"])
        if self.tokenizer.convert_tokens_to_ids(self.processor.video_token) != token_id:
            raise ConfigError(f"{self._dir()}: the tokenizer's <video> id differs from config.json's")
        return token_id

    @cached_property
    def tokens_per_frame(self) -> int:
        side = math.isqrt(int(self.processor.num_image_tokens))
        return math.ceil(side / 2) ** 2

    def video_tokens(self, frames: int) -> int:
        return frames * self.tokens_per_frame + 1

    def load_model(self, *, dtype: Any = None, device: Any = None) -> Any:
        import torch
        from transformers import AutoModelForImageTextToText

        _ = self.config
        model = AutoModelForImageTextToText.from_pretrained(str(self._dir()), dtype=dtype or torch.float32)
        return self.prepare_model(model.to(device) if device is not None else model).eval()

    def prepare_model(self, model: Any) -> Any:
        return model  # 1-D positions: nothing to align with the rollout engine

    # -- prompts ---------------------------------------------------------------------------------

    def _chat_ids(self, prompt: PromptInput) -> list[int]:
        content: list[dict[str, Any]] = [{"type": "video"} for _ in prompt.videos]
        content.append({"type": "text", "text": prompt.text})
        messages: list[dict[str, Any]] = []
        if prompt.system is not None:
            messages.append({"role": "system", "content": prompt.system})
        messages.append({"role": "user", "content": content})
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    def _prompt_tokens(self, prompt: PromptInput) -> tuple[list[int], list[int]]:
        if prompt.images:
            raise DataError(
                f"sample {prompt.sample_id!r}: the llava_onevision contrib backend does not support images "
                "yet (anyres tiling); use videos or another backend"
            )
        for i, (frames, meta) in enumerate(prompt.videos):
            check_frames(prompt.sample_id, frames, self.factor, index=i)
            if meta.num_frames != frames.shape[0]:
                raise DataError(f"sample {prompt.sample_id!r}, video {i}: metadata and frames disagree")
        compact = self._chat_ids(prompt)
        if compact.count(self.video_token_id) != len(prompt.videos):
            raise AlignmentError(
                f"sample {prompt.sample_id!r}: the rendered prompt has {compact.count(self.video_token_id)} "
                f"<video> placeholder(s) for {len(prompt.videos)} video(s); does the text contain '<video>'?"
            )
        counts = iter(self.video_tokens(frames.shape[0]) for frames, _ in prompt.videos)
        expanded: list[int] = []
        for tok in compact:
            expanded += [tok] * (next(counts) if tok == self.video_token_id else 1)
        return expanded, compact

    def prompt_length(self, prompt: PromptInput) -> int:
        return len(self._prompt_tokens(prompt)[0])

    def encode(self, prompt: PromptInput) -> EncodedPrompt:
        expanded, compact = self._prompt_tokens(prompt)
        visual: dict[str, torch.Tensor] = {}
        if prompt.videos:
            lengths = {frames.shape[0] for frames, _ in prompt.videos}
            if len(lengths) > 1:
                raise DataError(
                    f"sample {prompt.sample_id!r}: its videos have different frame counts {sorted(lengths)}"
                )
            out = self.processor.video_processor(videos=[f for f, _ in prompt.videos], return_tensors="pt")
            visual["pixel_values_videos"] = out["pixel_values_videos"]
        encoded = EncodedPrompt(prompt.sample_id, expanded, None, visual, compact, prompt)
        self._check_rows([expanded], [encoded.sample_id], visual.get("pixel_values_videos"))
        return encoded

    # -- batches ---------------------------------------------------------------------------------

    def _check_rows(self, rows: list[list[int]], sample_ids: list[str], videos: torch.Tensor | None) -> None:
        per_video = 0 if videos is None else self.video_tokens(videos.shape[1])
        available = 0 if videos is None else videos.shape[0]
        for row, sample_id in zip(rows, sample_ids):
            tokens = row.count(self.video_token_id)
            need = tokens // per_video if per_video else 0
            if tokens != need * per_video or need > available:
                raise AlignmentError(
                    f"sample {sample_id!r}: {tokens} <video> tokens, but the videos left for it "
                    f"({available} of {per_video} features each) cannot match them exactly. Likely cause: "
                    "a cut prompt, a <video> token in a response, or frames resampled after tokenising."
                )
            available -= need
        if available:
            raise AlignmentError(
                f"samples {sample_ids}: {available} video(s) have no <video> tokens in any prompt"
            )

    def check_inputs(self, inputs: ModelInputs) -> None:
        self._check_rows(inputs.input_ids.tolist(), inputs.sample_ids, inputs.pixel_values_videos)

    def collate(
        self, encoded: Sequence[EncodedPrompt], responses: Sequence[Sequence[int]] | None = None
    ) -> ModelInputs:
        frames = {e.sample_id: e.visual["pixel_values_videos"].shape[1] for e in encoded if e.visual}
        if len(set(frames.values())) > 1:
            raise DataError(
                f"LLaVA-OneVision batches videos as one tensor: every video of a batch needs the same frame "
                f"count, got {frames}. Sample a fixed number of frames (video_max_frames) or batch by length."
            )
        if responses is not None:
            for enc, response in zip(encoded, responses):
                check_response_tokens(enc.sample_id, response, self.forbidden_token_ids())
        inputs = collate_encoded(encoded, pad_token_id=self.tokenizer.pad_token_id, responses=responses)
        self.check_inputs(inputs)
        return inputs

    def rollout_request(self, encoded: EncodedPrompt) -> RolloutRequest:
        videos = [frames.permute(0, 2, 3, 1).contiguous().numpy() for frames, _ in encoded.prompt.videos]
        return RolloutRequest(
            sample_id=encoded.sample_id,
            prompt_ids=list(encoded.prompt_ids),
            engine_prompt_ids=list(encoded.engine_prompt_ids),
            multi_modal_data={"video": videos} if videos else {},
            mm_processor_kwargs={},
        )

    @cached_property
    def _forbidden(self) -> frozenset[int]:
        vocab_size = int(self.config["text_config"]["vocab_size"])
        ids = {self.video_token_id, int(self.config["image_token_index"])}
        return frozenset(ids | set(range(len(self.tokenizer), vocab_size)))

    def forbidden_token_ids(self) -> frozenset[int]:
        return self._forbidden

    def end_of_turn_id(self) -> int:
        """``<|im_end|>`` of its Qwen2 chat template (the tokenizer's end token when it has none)."""
        end = self.tokenizer.get_vocab().get("<|im_end|>", self.tokenizer.eos_token_id)
        return int(end)

    def install_vision_sync(self, model: Any) -> _VisionSync:
        return _VisionSync(model)

    def checkpoint_layout(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The SigLIP tower's weights under the Hub's ``vision_tower.vision_model.*`` names."""
        from videorl_models_llava_onevision.hub_layout import hub_key_names

        return hub_key_names(state)

    @classmethod
    def build_tiny(
        cls, out_dir: str | Path, *, model_type: str | None = None, seed: int = 0, width: int = 64
    ) -> Path:
        """A tiny random checkpoint (``width``: the text hidden size; the vision tower gets half)."""
        from videorl_models_llava_onevision.tiny import build_tiny

        if model_type not in (None, *cls.model_types):
            raise ConfigError(f"the llava_onevision backend has no tiny model of type {model_type!r}")
        return build_tiny(out_dir, seed=seed, width=width)


class _VisionSync:
    """A zero-weighted dummy pass through tower, projector and newline when a forward has no video.

    It reads the tower's hidden states at ``vision_feature_layer`` as the real path does, so the same
    parameters receive gradients on a text-only rank as on a rank with videos.
    """

    def __init__(self, model: Any) -> None:
        inner = model.model
        self._inner = inner
        self.dummy = True
        self.dummy_calls = 0
        self._ran = False
        self._handles = [
            inner.vision_tower.register_forward_hook(self._after_tower),
            inner.language_model.register_forward_pre_hook(self._before_language_model, with_kwargs=True),
        ]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    def _after_tower(self, *_: Any) -> None:
        self._ran = True

    def _before_language_model(self, module: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        import torch

        ran, self._ran = self._ran, False
        embeds = kwargs.get("inputs_embeds")
        if ran or not self.dummy or embeds is None:
            return None
        tower = self._inner.vision_tower
        size = tower.config.image_size
        pixels = torch.zeros(1, 3, size, size, dtype=embeds.dtype, device=embeds.device)
        layer = self._inner.config.vision_feature_layer  # the layer the real path reads, as it reads it
        hidden = tower(pixels, output_hidden_states=True).hidden_states[layer]
        features = self._inner.multi_modal_projector(hidden)
        term = (features.float().mean() + self._inner.image_newline.float().sum()) * 0.0
        self.dummy_calls += 1
        return args, {**kwargs, "inputs_embeds": embeds + term.to(embeds.dtype)}
