"""Samples made into prompts: :class:`Prompt` (a sample, its encoded prompt and its media metadata) and
:class:`PromptEncoder`, which turns a :class:`~videorl.data.Sample` into the prompt the backend tokenises
once. Its frames come from the media cache (the only place videos are decoded), its text from the
sample's prompt template (looked up for the ``problem_type``, then for the rewards that score it).
``PromptEncoder.check`` renders every row's text before the model loads, so a missing template or
field is an error naming the row, not a crash mid-run. With ``data.prefetch`` a background thread
(:class:`Prefetcher`) prepares the next batch while this step generates and updates."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from videorl.errors import DataError, UnknownComponentError
from videorl.media import MediaCache
from videorl.media.info import MediaInfo
from videorl.media.loader import MediaLoader
from videorl.prompts import render_prompt

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import DataConfig
    from videorl.data import Sample
    from videorl.model_inputs import EncodedPrompt
    from videorl.prompts import PromptTemplate
    from videorl.registry import Registry
    from videorl.rewards.router import RewardRouter

log = logging.getLogger("videorl.train")


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


class EncodedOnRead(Sequence[Prompt]):
    """Samples that are encoded each time they are read, never held encoded (the validation prompts:
    their frames and pixels are in host memory only while a validation pass uses them, and start-up
    encodes none). Read each prompt once per pass: ``list(prompts)``."""

    def __init__(self, samples: Sequence[Sample], encode: Callable[[Sample], Prompt]) -> None:
        self.samples, self._encode = list(samples), encode

    def __len__(self) -> int:
        return len(self.samples)

    @overload
    def __getitem__(self, index: int) -> Prompt: ...

    @overload
    def __getitem__(self, index: slice) -> list[Prompt]: ...

    def __getitem__(self, index: int | slice) -> Prompt | list[Prompt]:
        if isinstance(index, slice):
            return [self._encode(s) for s in self.samples[index]]
        return self._encode(self.samples[index])


class Prefetcher:
    """Prepares samples in one background thread, in the order queued, for the thread that asks for them.

    ``prefetch(samples)`` queues ``samples``: entries already queued that start the list are kept (the
    current batch, prepared since the previous call), the others cancelled, so at most one list is
    pending. ``get(sample)`` returns the result of the first queued entry for that sample, waiting for
    it, or prepares the sample at once when none is queued. ``prepare`` runs under a lock, never on two
    threads at once (the backend's processor and the media loader are not shared between threads). A
    sample that failed in the background raises its own exception from ``get``, with a note naming it.
    ``close()`` cancels what is queued and stops the thread; afterwards ``prefetch`` does nothing and
    ``get`` prepares each sample at once, on the calling thread (a closed prefetcher still works).
    """

    def __init__(self, prepare: Callable[[Sample], Prompt]) -> None:
        self._prepare = prepare
        self._lock = threading.Lock()
        self._queued: list[tuple[Sample, Future[Prompt]]] = []  # touched by the asking thread only
        # None is the sentinel ``close`` sends: the thread returns, releasing ``prepare`` and its owner
        self._work: queue.SimpleQueue[tuple[Sample, Future[Prompt]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def prefetch(self, samples: Sequence[Sample]) -> None:
        if self._closed:
            return
        keep = 0
        while keep < min(len(self._queued), len(samples)) and self._queued[keep][0] is samples[keep]:
            keep += 1
        for _, dropped in self._queued[keep:]:
            dropped.cancel()  # one already running finishes; its result is dropped
        self._queued = self._queued[:keep]
        for sample in samples[keep:]:
            future: Future[Prompt] = Future()
            self._queued.append((sample, future))
            self._work.put((sample, future))
        if self._thread is None:
            # a daemon: a run that ends with a batch still being prepared does not wait for it
            self._thread = threading.Thread(target=self._run, name="videorl-prefetch", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Cancel the queued samples and stop the thread, waiting up to ``timeout`` seconds for a sample
        being prepared to finish; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        for _, future in self._queued:
            future.cancel()
        self._queued = []
        if self._thread is not None:
            self._work.put(None)
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning(
                    "data.prefetch: the background thread is still preparing a sample after %.0f s; "
                    "it stops when that sample is done",
                    timeout,
                )
            self._thread = None

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            sample, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                with self._lock:
                    result = self._prepare(sample)
            except BaseException as exc:  # handed to the asking thread, which raises it
                future.set_exception(exc)
            else:
                future.set_result(result)
                # the prompt is the asking thread's now: this thread keeps no reference while it
                # waits, so a step's batch is freed when the step drops it (one batch in flight)
                del result
            del item, future

    def get(self, sample: Sample) -> Prompt:
        for i, (queued, future) in enumerate(self._queued):
            if queued is sample:
                del self._queued[i]
                try:
                    return future.result()
                except Exception as exc:
                    if hasattr(exc, "add_note"):  # Python >= 3.11
                        exc.add_note(
                            f"(raised while preparing sample {sample.id!r} of {sample.origin} in the "
                            "background: data.prefetch)"
                        )
                    raise
        with self._lock:
            return self._prepare(sample)


def media_loader(data: DataConfig, backend: ModelBackend) -> MediaLoader:
    """The media loader of the ``data`` section: its frame cache (none: decode on the fly) and its
    video and image budgets over the family's (as evaluation resolves them)."""
    cache = (
        MediaCache(data.cache_dir, data.source_mode) if data.cache_dir else MediaCache(None, "realtime_only")
    )
    return MediaLoader.for_budget(cache, data.visual_budget(backend.budget), backend)


class PromptEncoder:
    """Sample -> :class:`Prompt`: media from the loader (the frame cache), text from the sample's template.

    Calling the encoder returns the prompt prepared in the background when :meth:`prefetch` queued the
    sample (:class:`Prefetcher`), else prepares it at once (:meth:`prepare`); the result is the same."""

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
        #: the tools a sample's prompt offers (its workflow's: ``prompt_tools``); None: none
        self.prompt_tools: Callable[[Sample], Sequence[Mapping[str, Any]]] | None = None
        self._ahead = Prefetcher(self.prepare)

    def tools(self, sample: Sample) -> list[Mapping[str, Any]]:
        """The tool specs ``sample``'s prompt offers (the tool_agent workflow's tools; else none)."""
        return list(self.prompt_tools(sample)) if self.prompt_tools is not None else []

    def text(self, sample: Sample) -> str:

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
                    f"{sample.origin}: sample {sample.id!r} of problem_type {sample.problem_type!r}{route}: "
                    f"{exc} "
                    "Set data.prompt_template to use one template for every row."
                ) from None
            except DataError as exc:
                raise DataError(f"{sample.origin}: {exc}") from None

    def prefetch(self, samples: Sequence[Sample]) -> None:
        """Prepare ``samples`` in a background thread, in order, for the calls that will ask for them."""
        self._ahead.prefetch(samples)

    def __call__(self, sample: Sample) -> Prompt:
        return self._ahead.get(sample)

    def close(self) -> None:
        """Stop the background thread (:meth:`Prefetcher.close`); the encoder still prepares samples,
        on the calling thread."""
        self._ahead.close()

    def prepare(self, sample: Sample) -> Prompt:
        """Load the sample's media, render its text and encode it (on the calling thread)."""
        from videorl.backend import PromptInput

        videos = [self.media.video(path) for path in sample.videos]
        images = [self.media.image(path) for path in sample.images]
        media = MediaInfo.from_metadata(videos[0][1]) if videos else None
        tools = self.tools(sample)
        prompt = PromptInput(sample.id, self.text(sample), videos=videos, images=images, tools=tools)
        encoded = self.backend.encode(prompt)
        if self.max_prompt_length is not None and len(encoded) > self.max_prompt_length:
            raise DataError(
                f"{sample.origin}: sample {sample.id!r} has {len(encoded)} prompt tokens (text and visual), "
                f"over data.max_prompt_length={self.max_prompt_length}. Raise the limit or lower the video "
                "budget (data.video_max_pixels, data.video_max_frames); prompts are never cut."
            )
        return Prompt(sample, encoded, media)
