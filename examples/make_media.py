"""Write the clips and images that ``examples/data/train.jsonl`` refers to (``examples/data/media/``).

Run once after cloning: ``.venv/bin/python examples/make_media.py`` (or ``--out DIR`` to write them into
another data folder holding a copy of ``train.jsonl``). Every file is drawn here, from a fixed seed: a
coloured square on a dark, noisy background, so the answers in the dataset are true of the pixels.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from videorl.media.synthetic import write_video

WIDTH, HEIGHT, FPS = 64, 48, 8.0
SQUARE = 16
COLOURS = {"red": (220, 40, 40), "green": (40, 190, 60), "blue": (40, 70, 230), "white": (235, 235, 235)}
BOX = (16, 8, 40, 32)  # x1, y1, x2, y2 in pixels of the 64 x 48 image (square.png)


def _background(rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 40, size=(HEIGHT, WIDTH, 3), dtype=np.uint8)


def square_clip(
    colour: str, seconds: float, rng: np.random.Generator, shown: tuple[float, float] | None = None
) -> list[np.ndarray]:
    """Frames of a square moving right one pixel per frame; with ``shown``, only in that time range."""
    frames = []
    for i in range(int(seconds * FPS)):
        frame = _background(rng)
        t = i / FPS
        if shown is None or shown[0] <= t < shown[1]:
            x, y = 4 + i % (WIDTH - SQUARE - 8), (HEIGHT - SQUARE) // 2
            frame[y : y + SQUARE, x : x + SQUARE] = COLOURS[colour]
        frames.append(frame)
    return frames


def write_media(out: Path) -> list[Path]:
    """Write every clip and image into ``out / "media"``; their paths."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    media = out / "media"
    media.mkdir(parents=True, exist_ok=True)
    written = [
        write_video(media / "red.mp4", square_clip("red", 2.0, rng), fps=FPS),
        write_video(media / "blue.mp4", square_clip("blue", 2.0, rng), fps=FPS),
        # the square is on screen from 1 s to 3 s of a 4 s clip (temporal grounding)
        write_video(media / "appears.mp4", square_clip("green", 4.0, rng, shown=(1.0, 3.0)), fps=FPS),
    ]
    image = _background(rng)
    x1, y1, x2, y2 = BOX
    image[y1:y2, x1:x2] = COLOURS["white"]
    Image.fromarray(image).save(media / "square.png")
    text = Image.new("RGB", (WIDTH * 2, HEIGHT), (255, 255, 255))
    ImageDraw.Draw(text).text((8, 16), "VIDEO RL", fill=(0, 0, 0))
    text.save(media / "text.png")
    return [*written, media / "square.png", media / "text.png"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "data",
        help="data folder to write media/ into (default: examples/data)",
    )
    for path in write_media(parser.parse_args().out):
        print(path)


if __name__ == "__main__":
    main()
