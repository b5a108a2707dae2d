"""Video intake: every video reaches the engine as its own file's bytes, once its container is sniffed and OpenCV
has probed and decoded it the way vLLM will."""

from __future__ import annotations

import base64
import hashlib
import os
import functools
import io
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
from PIL import Image

from ..errors import InputError
from ..settings import Settings
from .containers import not_a_video, sniff_video, track_kinds



VIDEO_SUFFIXES = (".mp4", ".webm", ".mov", ".mkv")
"""File name endings taken for videos (the container itself is sniffed from the bytes)."""

VIDEO_MIME = {"mp4": "video/mp4", "webm": "video/webm", "mov": "video/quicktime", "mkv": "video/x-matroska"}
"""Media type of each container, for ``data:`` URLs."""


@dataclass(frozen=True)
class Video:
    """One checked video: the file's own bytes (what vLLM decodes) and what the probe found."""

    data: bytes = field(repr=False)
    """The file, unchanged: vLLM decodes these very bytes (OpenCV, from memory)."""
    container: str
    """``"mp4"``, ``"webm"``, ``"mov"`` or ``"mkv"``, sniffed from the header."""
    size: tuple[int, int]
    """Frame width and height, in pixels."""
    num_frames: int
    """Frames the container says it holds (> 0); vLLM samples from these."""
    fps: float
    """Frames per second, as the container says (> 0)."""
    duration_s: float
    """``num_frames / fps``, in seconds."""
    name: str = "the video"
    """How messages name it (the file name, or a shortened URL)."""
    poster: Image.Image | None = field(default=None, repr=False, compare=False)
    """The first frame, at most ``POSTER_SIDE`` px a side (what the chat shows for the clip: a browser plays
    few of the codecs vLLM decodes)."""
    sound: bool | None = None
    """Whether its container lists a sound track (None: the container did not say)."""

    @functools.cached_property
    def digest(self) -> str:
        """A name for the file's bytes: equal files get equal names."""
        return hashlib.blake2b(self.data, digest_size=16).hexdigest()

    def data_url(self) -> str:
        """The file as a base64 ``data:video/...`` URL: how a video travels to vLLM. Not kept: encoding the
        largest allowed file takes tens of milliseconds, and a kept copy would cost a third more memory."""
        return f"data:{VIDEO_MIME[self.container]};base64," + base64.b64encode(self.data).decode("ascii")


def is_video_name(name: str) -> bool:
    """True for a file name (or URL path) that ends in a video suffix (any case)."""
    return name.lower().endswith(VIDEO_SUFFIXES)


def load_video(source: str | Path | bytes, settings: Settings, name: str | None = None) -> Video:
    """Read, sniff, probe and decode-check one video. Bad input raises ``InputError``, one line naming the
    video as ``name`` (default: the path given, or "the video"); nothing else escapes.

    The probe opens the bytes the way vLLM's OpenCV decoder will (a stream-buffered FFmpeg capture over
    ``BytesIO``), checks the header's frame size, count, rate and duration against the settings, then
    grabs every frame once (no colour conversion) within ``max_video_decode_s``."""
    name = name or (str(source) if isinstance(source, (str, Path)) else "the video")
    data = _read_video(source, name, settings)
    container = sniff_video(data)
    allowed = ", ".join(settings.allowed_video_formats)
    if container is None:
        what = not_a_video(data)
        if what.endswith("video"):
            raise InputError(f"{name}: {what}s are not accepted; use {allowed}")
        raise InputError(f"{name}: not a video{f' ({what})' if what else ''}; use {allowed}")
    if container not in settings.allowed_video_formats:
        raise InputError(f"{name}: {container} videos are not accepted; use {allowed}")
    size, num_frames, fps, poster = _probe(data, name, container, settings)
    kinds = track_kinds(data, container)
    return Video(data, container, size, num_frames, fps, num_frames / fps, name, poster,
                 None if kinds is None else "audio" in kinds)


def _read_video(source: str | Path | bytes, name: str, settings: Settings) -> bytes:
    limit = settings.max_video_bytes
    try:
        if isinstance(source, (str, Path)):
            if Path(source).stat().st_size > limit:  # before reading a huge file into memory
                raise InputError(f"{name}: file is larger than {limit:,} bytes")
            data = Path(source).read_bytes()
        else:
            data = bytes(source)
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror}") from None
    if len(data) > limit:
        raise InputError(f"{name}: file is larger than {limit:,} bytes")
    return data



def _probe(data: bytes, name: str, container: str,
           settings: Settings) -> tuple[tuple[int, int], int, float, Image.Image | None]:
    """Frame size, frame count and fps of a video, once OpenCV has opened it like vLLM does and grabbed
    every frame within the time limit, and its first frame (small)."""
    backend = _capture_backend()
    if backend is None:
        raise InputError("videos cannot be decoded on this server (OpenCV has no stream-buffered video backend)")
    _quiet_opencv()
    broken = InputError(f"{name}: cannot be decoded (truncated or damaged?)")
    no_video = InputError(f"{name}: has no video track (audio only?)")
    no_frames = InputError(f"{name}: has no frames")
    tracks = track_kinds(data, container)
    if tracks is not None and "video" not in tracks:
        raise no_video
    # The capture keeps a reference to its stream, and release() drops it and then still uses the stream:
    # with no other reference left that is a use-after-free (a segfault, opencv-python-headless 5.1).
    stream = io.BytesIO(data)
    cap = None
    try:
        cap = cv2.VideoCapture(stream, backend, [])
        if not cap.isOpened():
            raise broken
        width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        if width * height > settings.max_video_frame_pixels:  # before anything decodes a frame
            raise InputError(f"{name}: frames are {width}x{height}; the limit is "
                             f"{settings.max_video_frame_pixels:,} pixels")
        if width <= 0 or height <= 0:  # a listed video track with nothing in it, or no video stream at all
            raise no_frames if tracks else no_video
        num_frames, fps = _frame_count(cap), float(cap.get(cv2.CAP_PROP_FPS))
        if num_frames <= 0 or not fps > 0:
            raise no_frames
        if num_frames / fps > settings.max_video_seconds:
            raise InputError(f"{name}: is {num_frames / fps:.1f} s long; the limit is {settings.max_video_seconds:g} s")
        deadline = time.monotonic() + settings.max_video_decode_s
        decoded, poster = 0, None
        while cap.grab():
            if decoded == 0:
                poster = _poster(cap)
            decoded += 1
            if time.monotonic() > deadline:
                raise InputError(f"{name}: took over {settings.max_video_decode_s:g} s to decode; "
                                 "use a shorter or smaller clip")
        if decoded == 0:
            raise InputError(f"{name}: has no decodable frames")
    except cv2.error:
        raise broken from None
    finally:
        if cap is not None:
            cap.release()
        del stream
    return (width, height), num_frames, fps, poster


POSTER_SIDE = 480
"""Longest side of a video's first-frame picture in the chat, in pixels."""


def _poster(cap: cv2.VideoCapture) -> Image.Image | None:
    """The frame just grabbed, as a small RGB picture (None where it does not decode)."""
    ok, frame = cap.retrieve()
    if not ok or frame is None:
        return None
    picture = Image.fromarray(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    picture.thumbnail((POSTER_SIDE, POSTER_SIDE))
    return picture


def _frame_count(cap: cv2.VideoCapture) -> int:
    """The header's frame count, corrected as vLLM corrects it (``get_video_metadata``): an mp4 edit list
    may hide a decode lead-in, which an end-of-stream seek exposes without decoding anything."""
    total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    if total > 0 and cap.set(cv2.CAP_PROP_POS_AVI_RATIO, 1.0):
        visible = int(cap.get(cv2.CAP_PROP_POS_FRAMES))
        at_end = not cap.grab()
        cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
        if at_end and 0 < visible < total - 1:
            total = visible
    return total


@functools.cache
def _capture_backend() -> int | None:
    """The first usable stream-buffered OpenCV backend (FFmpeg), chosen as vLLM's OpenCV loader does."""
    import cv2.videoio_registry as registry

    for backend in registry.getStreamBufferedBackends():
        if not registry.hasBackend(backend):
            continue
        if not registry.isBackendBuiltIn(backend):
            _, abi, api = registry.getStreamBufferedBackendPluginVersion(backend)
            if abi < 1 or (abi == 1 and api < 2):
                continue
        return backend
    return None


@functools.cache
def _quiet_opencv() -> None:
    """OpenCV's warnings about a file it cannot open ("backend ... can't be used to capture by read data
    stream") say less than our one line; keep only its errors, unless ``OPENCV_LOG_LEVEL`` asks otherwise.
    (FFmpeg's own lines, such as "moov atom not found", still reach stderr: OpenCV gives no switch for them.)"""
    if "OPENCV_LOG_LEVEL" not in os.environ:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
