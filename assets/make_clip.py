"""Writes the example clip, ``moving-square.webm`` (VP8, which browsers play) and ``moving-square.mp4``
(MPEG-4 part 2), next to this script: 320x240, 12 fps, 4 s (48 frames), a red square crossing a white
background left to right, each frame's number in the top-left corner. Run ``python assets/make_clip.py``."""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np

HERE = Path(__file__).resolve().parent
WIDTH, HEIGHT, FPS, FRAMES = 320, 240, 12, 48
SQUARE = 60
OUTPUTS = {"moving-square.webm": "VP80", "moving-square.mp4": "mp4v"}


def frame(index: int) -> np.ndarray:
    """Frame ``index`` (BGR): the square's left edge moves evenly from 0 to the right border."""
    image = np.full((HEIGHT, WIDTH, 3), 255, np.uint8)
    x = round(index * (WIDTH - SQUARE) / (FRAMES - 1))
    y = (HEIGHT - SQUARE) // 2
    cv2.rectangle(image, (x, y), (x + SQUARE - 1, y + SQUARE - 1), (40, 40, 220), thickness=-1)
    cv2.putText(image, f"{index:02d}", (8, 28), cv2.FONT_HERSHEY_SIMPLEX, 0.9, (0, 0, 0), 2, cv2.LINE_AA)
    return image


def write(path: Path, fourcc: str) -> None:
    """Write the clip to a temporary file beside ``path`` (same container suffix), then move it into place."""
    temporary = path.with_name(f".{path.stem}.tmp{path.suffix}")
    writer = cv2.VideoWriter(str(temporary), cv2.VideoWriter_fourcc(*fourcc), FPS, (WIDTH, HEIGHT))
    if not writer.isOpened():
        raise SystemExit(f"OpenCV cannot write {fourcc} into {path.suffix} files here")
    try:
        for index in range(FRAMES):
            writer.write(frame(index))
    finally:
        writer.release()
    os.replace(temporary, path)


def main() -> None:
    for name, fourcc in OUTPUTS.items():
        write(HERE / name, fourcc)
        print(f"{name}: {(HERE / name).stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
