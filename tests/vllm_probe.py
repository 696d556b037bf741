"""The probe of the vLLM weight-refresh tests (test_train_vllm.py, test_vllm_checkpoint_layout.py): a video
and a text prompt, sampled by the engine, scored by a model's fp32 teacher-forced forward.

Imported by those tests' scripts in the subprocess that runs vLLM (vLLM changes process-wide settings that
must not leak into pytest); tests/ is on that subprocess's PYTHONPATH through the ``vllm_env`` fixture of
tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from videorl.api import PromptInput, response_logprobs
from videorl.media import VideoMetadata
from videorl.rollout import SamplingParams

#: two sampled responses of at most 8 tokens a prompt
PARAMS = SamplingParams(n=2, temperature=1.0, max_tokens=8, seed=0)


def probe_prompts(backend: Any, gen: torch.Generator) -> list[Any]:
    """The encoded probe: 4 random frames of 2x2 patches (frames 0, 5, 10, 15 of a 4 s clip at 4 fps,
    drawn from ``gen``) with a question, and a text-only prompt."""
    f = backend.factor
    frames = torch.randint(0, 256, (4, 3, 2 * f, 2 * f), dtype=torch.uint8, generator=gen)
    meta = VideoMetadata(
        source_fps=4.0,
        total_frames=16,
        duration=4.0,
        frame_indices=(0, 5, 10, 15),
        timestamps=(0.0, 1.25, 2.5, 3.75),
        source_width=2 * f,
        source_height=2 * f,
        width=2 * f,
        height=2 * f,
    )
    return [
        backend.encode(PromptInput("video", "What colour is the square?", videos=[(frames, meta)])),
        backend.encode(PromptInput("text", "Which direction does the object move?")),
    ]


def max_logprob_diff(
    backend: Any, prompts: Sequence[Any], groups: Sequence[Sequence[Any]], model: Any
) -> tuple[float, int]:
    """The largest difference of the engine's per-token log-probs (``groups``, one per prompt) from
    ``model``'s teacher-forced forward of the same responses, and the number of tokens compared."""
    forbidden = backend.forbidden_token_ids()
    diffs = []
    for enc, group in zip(prompts, groups, strict=True):
        responses = [c.token_ids for c in group]
        inputs = backend.collate([enc] * len(responses), responses)
        with torch.no_grad():
            logits = model(**inputs.model_kwargs()).logits
        ours = response_logprobs(logits, inputs, forbidden=forbidden)
        diffs += [
            abs(float(ours[row, j]) - lp) for row, c in enumerate(group) for j, lp in enumerate(c.logprobs)
        ]
    return max(diffs), len(diffs)
