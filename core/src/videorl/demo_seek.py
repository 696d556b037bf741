"""The ``seek`` demo task: the answer lies in a short window that the prompt's overview never shows, so
the policy must ask for that window's frames (``get_frames``) before it answers.

Each clip is 32 s of a dark, noisy 56×56 frame at 2 fps with a white mark in one of its four 28-pixel
cells (one visual token each). For 4 s the three other cells flash one of :data:`~videorl.demo.COLOURS`
(the answer; chance 0.25); the mark's cell tells which 4 s window: the four windows
(:data:`WINDOWS`) are those the 4-frame overview of the prompt (at 0, 10.5, 21 and 31.5 s) never
lands in. The tool decodes the window it is asked for (``rollout.tool_frames: decode``); the control
runs the same trained policy with the tool blind (``tool_frames: prompt``: a window's frames are the
overview's, which never show the flash), so its accuracy is what the overview alone gives.

Mix-policy bootstraps the format: the offline trajectory of a row is the correct call then the answer
(:func:`offline_output`), replayed through the tool like the policy's own calls.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from videorl.encoding import Prompt
    from videorl.rollout.scoring import Scorer
    from videorl.train.compose import Training

DURATION, FPS, SIDE, CELL = 32.0, 2.0, 56, 28
#: the flash windows' starts (s), one per cell of the mark (top-left, top-right, bottom-left,
#: bottom-right); each lasts ``WINDOW`` s and holds none of the overview's frames
WINDOWS, WINDOW = (4, 12, 16, 24), 4
QUESTION = "What colour flashes?"
MARK = (235, 235, 235)
#: the run's settings for this task, after the demo's own (:func:`videorl.demo.demo_overrides`)
OVERRIDES = (
    "rollout.workflow=tool_agent",
    "rollout.tools=[get_frames]",
    "rollout.tool_frames=decode",
    "rollout.max_turns=2",
    "rollout.max_frames_per_call=4",
    "rollout.max_response_length=192",  # the call (61 tokens of the tiny tokenizer), the reply, the answer
    "data.source_mode=prefer_preprocessed",  # the windows asked for are decoded once, then cached
    "data.max_prompt_length=2048",  # the tool's description in the system turn
)


def offline_output(window: int, letter: str) -> str:
    """The correct episode of a row: the call for its window (compact JSON: fewest tokens), then the
    answer."""
    start = WINDOWS[window]
    arguments = {"start": start, "end": start + WINDOW, "n": 2}
    call = json.dumps({"name": "get_frames", "arguments": arguments}, separators=(",", ":"))
    return f"<tool_call>{call}</tool_call><answer>{letter}</answer>"


def seek_frames(colour: tuple[int, int, int], window: int, rng: random.Random) -> list[Any]:
    """The ``DURATION * FPS`` RGB frames of one clip: the mark in cell ``window``, the other cells
    flashing ``colour`` during that window."""
    import numpy as np

    noise = np.random.default_rng(rng.randrange(2**32))
    row, col = divmod(window, 2)
    start = WINDOWS[window]
    frames = []
    for k in range(int(DURATION * FPS)):
        frame = noise.integers(0, 40, size=(SIDE, SIDE, 3), dtype=np.uint8)
        if start <= k / FPS < start + WINDOW:
            frame[:, :] = colour
            frame[row * CELL : (row + 1) * CELL, col * CELL : (col + 1) * CELL] = noise.integers(
                0, 40, size=(CELL, CELL, 3), dtype=np.uint8
            )
        top, left = row * CELL + 6, col * CELL + 6
        frame[top : top + 16, left : left + 16] = MARK
        frames.append(frame)
    return frames


def write_seek(
    out: Path,
    count: int,
    *,
    seed: int,
    split: str,
    colours: dict[str, tuple[int, int, int]],
    options: Sequence[str],
) -> Path:
    """Write ``count`` clips (colours and windows balanced and independent) and their dataset JSONL;
    option ``i`` (letter ``"ABCD"[i]``) names ``colours``' ``i``-th colour."""
    from videorl.media.synthetic import write_video

    rng = random.Random(f"{seed}-{split}-seek")
    order = list(range(count))
    rng.shuffle(order)
    clips = out / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    names, rows = list(colours), []
    for i, k in enumerate(order):
        colour, window = k % len(names), (k // len(names)) % len(WINDOWS)
        path = clips / f"{split}-{i:04d}.mp4"
        write_video(path, seek_frames(colours[names[colour]], window, rng), fps=FPS)
        letter = "ABCD"[colour]
        rows.append(
            {
                "id": f"{split}-{i:04d}",
                "data_type": "video",
                "problem_type": "multiple choice",
                "problem": QUESTION,
                "options": list(options),
                "answer": letter,
                "videos": [f"clips/{path.name}"],
                "offline_output": offline_output(window, letter),
            }
        )
    dataset = out / f"{split}.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return dataset


def score_with_tools(
    training: Training, prompts: Sequence[Prompt], scorer: Scorer, *, tool_frames: str
) -> dict[str, float]:
    """Greedy accuracy of the policy on ``prompts`` through its tool loop, with the tool serving
    ``tool_frames`` (``decode``: the windows asked for; ``prompt``: the overview's frames, the control),
    and the share of episodes that made a valid call."""
    from videorl.rollout.scoring import accuracy_of

    config = copy.deepcopy(training.config)
    r = config.rollout
    r.n, r.temperature, r.enable_mix_policy, r.tool_frames = 1, 0.0, False, tool_frames  # type: ignore[assignment]
    backend = training.actor.backend
    groups, _ = training.workflow.rollout(config, list(prompts), training.engine, scorer, backend, seed=None)
    episodes = [group[0] for group in groups]
    n = max(len(episodes), 1)
    called = sum(any(not c.invalid for c in e.tool_calls) for e in episodes)
    return {"accuracy": sum(accuracy_of(e) for e in episodes) / n, "called": called / n}
