"""Training data for the loop: a resumable, per-rank order over samples, and samples made into prompts.

``TrainData`` decides which samples a rank trains on, in a seeded order per epoch, and records its
position so that a resumed run continues exactly where the checkpoint was taken. ``PromptEncoder``
turns a :class:`~videorl.data.Sample` into the prompt the backend tokenises once: its frames come from
the media cache (the only place videos are decoded), its text from the sample's prompt template
(looked up for the ``problem_type``, then for the rewards that score it: a type routed by
``rewards.routes`` uses its reward's templates). ``PromptEncoder.check`` renders every row's text before
the model loads, so a missing template or field is an error naming the row, not a crash mid-run.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from videorl.errors import DataError, UnknownComponentError
from videorl.rewards.types import MediaInfo

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.data import Sample
    from videorl.media.loader import MediaLoader
    from videorl.model_inputs import EncodedPrompt
    from videorl.prompts import PromptTemplate
    from videorl.registry import Registry
    from videorl.rewards.router import RewardRouter


class TrainData:
    """Samples in a seeded order per epoch; rank ``r`` of ``w`` takes every ``w``-th sample.

    ``take(k)`` returns the next ``k`` samples of this rank, crossing epochs as needed (a new seeded
    shuffle each epoch when ``shuffle``). ``state_dict`` / ``load_state_dict`` hold the position.
    """

    def __init__(
        self,
        samples: Sequence[Sample],
        *,
        seed: int,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if len(samples) < world_size:
            raise DataError(f"{len(samples)} training samples cannot be shared by {world_size} ranks")
        self.samples = list(samples)
        self.seed, self.shuffle, self.rank, self.world_size = seed, shuffle, rank, world_size
        self.epoch, self.index = 0, 0
        self._order = self._epoch_order(0)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.samples)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        usable = len(order) - len(order) % self.world_size  # every rank gets the same count
        return order[self.rank : usable : self.world_size]

    def take(self, k: int) -> list[Sample]:
        out: list[Sample] = []
        while len(out) < k:
            if self.index >= len(self._order):
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self._epoch_order(self.epoch)
            out.append(self.samples[self._order[self.index]])
            self.index += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self._epoch_order(self.epoch)


@dataclass
class Prompt:
    """A sample ready for rollout and training: tokenised once, with what its rewards need.

    ``encoded`` is None where the prompt was encoded in another process (the Ray controller knows a
    prompt by its sample and media metadata only; its workers encode it where the frames are used).
    """

    sample: Sample
    encoded: EncodedPrompt | None
    media: MediaInfo | None

    def require_encoded(self) -> EncodedPrompt:
        """The tokenised prompt; an error where this process holds only the sample."""
        if self.encoded is None:
            raise RuntimeError(
                f"sample {self.sample.id!r}: its prompt was encoded in another process, not here"
            )
        return self.encoded


class PromptEncoder:
    """Sample -> :class:`Prompt`: media from the loader (the frame cache), text from the sample's template."""

    def __init__(
        self,
        backend: ModelBackend,
        media: MediaLoader,
        templates: Registry[Any],
        *,
        thinking: bool = False,
        max_prompt_length: int | None = None,
        template: PromptTemplate | None = None,
        rewards: RewardRouter | None = None,
    ) -> None:
        """``media`` loads the frames and images (the loader evaluation uses too); ``rewards`` (the run's
        router) says which rewards score a ``problem_type``: their templates serve it when it has none
        of its own; ``template`` (``data.prompt_template``) serves every row."""
        self.backend, self.media = backend, media
        self.templates, self.thinking = templates, thinking
        self.max_prompt_length = max_prompt_length
        self.template = template
        self.rewards = rewards

    def text(self, sample: Sample) -> str:
        from videorl.prompts import render_prompt

        fields = {**sample.extra, **sample.to_dict()}
        if self.template is not None:
            return self.template.render({**fields, "thinking": self.thinking, "family": self.backend.family})
        canonical = self.rewards.reward_names if self.rewards is not None else None
        return render_prompt(
            self.templates, fields, thinking=self.thinking, family=self.backend.family, canonical=canonical
        )

    def check(self, samples: Sequence[Sample]) -> None:
        """Render the prompt text of every sample (no frames, no model): a ``problem_type`` without a
        template, or a field a template needs and a row lacks, is a ``DataError`` naming the row, how its
        type is routed and the templates that exist."""
        for sample in samples:
            try:
                self.text(sample)
            except UnknownComponentError as exc:
                route = f" ({self.rewards.describe_route(sample.problem_type)})" if self.rewards else ""
                raise DataError(
                    f"{sample.origin}: sample {sample.id!r} of problem_type {sample.problem_type!r}{route}: {exc} "
                    "Set data.prompt_template to use one template for every row."
                ) from None
            except DataError as exc:
                raise DataError(f"{sample.origin}: {exc}") from None

    def __call__(self, sample: Sample) -> Prompt:
        from videorl.backend import PromptInput

        videos = [self.media.video(path) for path in sample.videos]
        images = [self.media.image(path) for path in sample.images]
        media = MediaInfo.from_metadata(videos[0][1]) if videos else None
        prompt = PromptInput(sample.id, self.text(sample), videos=videos, images=images)
        encoded = self.backend.encode(prompt)
        if self.max_prompt_length is not None and len(encoded) > self.max_prompt_length:
            raise DataError(
                f"{sample.origin}: sample {sample.id!r} has {len(encoded)} prompt tokens (text and visual), "
                f"over data.max_prompt_length={self.max_prompt_length}. Raise the limit or lower the video "
                "budget (data.video_max_pixels, data.video_max_frames); prompts are never cut."
            )
        return Prompt(sample, encoded, media)
