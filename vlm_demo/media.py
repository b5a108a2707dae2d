"""Media intake: every image reaches the engine as a decoded, checked, RGB Pillow image; every video as
its own file's bytes, once its container is sniffed and OpenCV has probed and decoded it the way vLLM will.

vLLM never fetches URLs or reads paths on the user's behalf; this module is the only way in.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import os
import struct
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as load_safetensors

from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import InputError
from .settings import ENCODED_IMAGES_KEPT, Settings


def load_image(source: str | Path | bytes | Image.Image, settings: Settings, name: str | None = None) -> Image.Image:
    """Decode and check one image; return it as RGB. Bad input raises ``InputError`` naming the image
    as ``name`` (default: the path given, or "the image").

    Animated images (GIF, WebP) give their first frame; transparency is flattened onto white;
    palette, CMYK, grey and 16-bit images are converted to 8-bit RGB; EXIF rotation is applied.
    """
    name = name or (str(source) if isinstance(source, (str, Path)) else "the image")
    if isinstance(source, Image.Image):
        image = source
    else:
        try:
            data = Path(source).read_bytes() if isinstance(source, (str, Path)) else source
        except OSError as exc:
            raise InputError(f"cannot read {name}: {exc.strerror}") from None
        image = _decode(data, str(name), settings)
    _check_size(image, str(name), settings)
    image = ImageOps.exif_transpose(image)
    if image.mode != "RGB":
        image = _to_rgb(image)
    return image


class Recent:
    """A bounded map that keeps the most recently used values (thread-safe); the oldest go first."""

    def __init__(self, size: int):
        self.size = size
        self._values: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], object]) -> object:
        """The value kept for ``key``, made (outside the lock) and kept when there is none."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = make()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value


def image_digest(image: Image.Image) -> str:
    """A name for an image's pixels (mode, size and bytes): equal pictures get equal names."""
    h = hashlib.blake2b(f"{image.mode} {image.size}".encode(), digest_size=16)
    h.update(image.tobytes())
    return h.hexdigest()


_PNG_URLS = Recent(ENCODED_IMAGES_KEPT)


def png_data_url(image: Image.Image) -> str:
    """A decoded image as a lossless base64 PNG ``data:`` URL: how images travel to a remote server (and
    into exported requests), so the server decodes the very pixels the app checked and fetches nothing.
    Fast compression (level 1 encodes several times faster), and kept by content: every turn re-sends the
    conversation's earlier images."""
    def encode() -> str:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", compress_level=1)
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    return _PNG_URLS.get(image_digest(image), encode)  # type: ignore[return-value]


def _decode(data: bytes, name: str, settings: Settings) -> Image.Image:
    if len(data) > settings.max_upload_bytes:
        raise InputError(f"{name}: file is larger than {settings.max_upload_bytes:,} bytes")
    Image.MAX_IMAGE_PIXELS = settings.max_image_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            if image.format not in settings.allowed_image_formats:
                allowed = ", ".join(settings.allowed_image_formats)
                raise InputError(f"{name}: {image.format} images are not accepted (use {allowed})")
            _check_size(image, name, settings)
            image.load()  # an animation loads its first frame, where Pillow opens it
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputError(f"{name}: image is too large (over {settings.max_image_pixels:,} pixels)") from None
    except UnidentifiedImageError:
        kind = "an SVG drawing (vector images are not accepted)" if b"<svg" in data[:4096].lower() else "not an image"
        raise InputError(f"{name}: {kind}; use {', '.join(settings.allowed_image_formats)}") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"{name}: broken image ({exc})") from None
    return image


def _check_size(image: Image.Image, name: str, settings: Settings) -> None:
    w, h = image.size
    if w < 1 or h < 1:
        raise InputError(f"{name}: empty image")
    if w * h > settings.max_image_pixels:
        raise InputError(f"{name}: image is too large ({w}x{h}; limit {settings.max_image_pixels:,} pixels)")


def _to_rgb(image: Image.Image) -> Image.Image:
    """Flatten transparency onto white; convert palette, CMYK, grey and 16-bit modes to RGB."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        image = image.point(lambda v: v / 256).convert("L")
    if image.mode == "P":
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA"):
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.getchannel("A"))
        return background
    return image.convert("RGB")


@dataclass(frozen=True)
class ImageEmbeds:
    """Precomputed image features for one image (LLaVA-1.5, Qwen2.5-VL), read from .safetensors."""

    tensors: dict[str, np.ndarray]
    """``image_embeds`` [tokens, hidden] and, for Qwen2.5-VL, ``image_grid_thw`` [3]."""

    @property
    def num_tokens(self) -> int:
        """Feature vectors, i.e. image tokens in the prompt."""
        return int(self.tensors["image_embeds"].shape[0])


EMBEDS_KEYS = frozenset({"image_embeds", "image_grid_thw"})


def load_image_embeds(path: str | Path, settings: Settings) -> ImageEmbeds:
    """Read image embeddings from a .safetensors file (never pickle / ``torch.load``)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > settings.max_upload_bytes:
        raise InputError(f"{path}: file is larger than {settings.max_upload_bytes:,} bytes")
    try:
        tensors = load_safetensors(data)
    except (SafetensorError, ValueError, OSError) as exc:
        raise InputError(f"{path}: not a .safetensors file ({exc})") from None
    if "image_embeds" not in tensors or not set(tensors) <= EMBEDS_KEYS:
        raise InputError(f"{path}: expected tensors 'image_embeds' (and 'image_grid_thw'), got {sorted(tensors)}")
    embeds = tensors["image_embeds"]
    if embeds.ndim != 2 or embeds.shape[0] < 1 or embeds.dtype.kind != "f":
        raise InputError(f"{path}: 'image_embeds' must be a 2-D float tensor [tokens, hidden], got "
                         f"{embeds.dtype} {list(embeds.shape)}")
    if "image_grid_thw" in tensors:
        grid = tensors["image_grid_thw"].reshape(-1)
        if grid.size != 3 or grid.dtype.kind not in "iu" or (grid <= 0).any():
            raise InputError(f"{path}: 'image_grid_thw' must hold three positive integers")
        tensors = {**tensors, "image_grid_thw": grid.astype(np.int64)}
    return ImageEmbeds(tensors)


# --- Videos -----------------------------------------------------------------------------------------------

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
        what = _not_a_video(data)
        if what.endswith("video"):
            raise InputError(f"{name}: {what}s are not accepted; use {allowed}")
        raise InputError(f"{name}: not a video{f' ({what})' if what else ''}; use {allowed}")
    if container not in settings.allowed_video_formats:
        raise InputError(f"{name}: {container} videos are not accepted; use {allowed}")
    size, num_frames, fps, poster = _probe(data, name, container, settings)
    return Video(data, container, size, num_frames, fps, num_frames / fps, name, poster)


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


# ISO-BMFF files (mp4, mov) open with a box; some older QuickTime files with one of these instead of ftyp.
_QUICKTIME_ATOMS = (b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot")
_STILL_BRANDS = (b"avif", b"avis", b"heic", b"heix", b"mif1", b"msf1")  # ftyp brands of still images
_AUDIO_BRANDS = (b"M4A ", b"M4B ")
_EBML_MAGIC = b"\x1a\x45\xdf\xa3"
_DOCTYPES = {"webm": "webm", "matroska": "mkv"}

#: (bytes at ``offset``, what a file that starts so is) for files that are not an accepted video.
_SIGNATURES: tuple[tuple[int, bytes, str], ...] = (
    (0, b"\x89PNG\r\n\x1a\n", "a PNG image"), (0, b"\xff\xd8\xff", "a JPEG image"), (0, b"GIF8", "a GIF image"),
    (8, b"WEBP", "a WebP image"), (0, b"BM", "a BMP image"), (0, b"II*\0", "a TIFF image"),
    (0, b"MM\0*", "a TIFF image"), (8, b"AVI ", "AVI video"), (0, b"FLV", "FLV video"), (0, b"OggS", "an Ogg file"),
    (0, b"\0\0\1\xba", "MPEG-PS video"), (8, b"WAVE", "a WAV audio file"), (0, b"ID3", "an MP3 audio file"),
    (0, b"fLaC", "a FLAC audio file"), (0, b"%PDF", "a PDF document"),
)


def sniff_video(data: bytes) -> str | None:
    """The container of a video file from its first bytes (``"mp4"``, ``"mov"``, ``"webm"``, ``"mkv"``), or
    None when it is none of them. Names and claimed media types are not consulted."""
    if len(data) >= 12 and data[4:8] == b"ftyp":
        brand = data[8:12]
        if brand in _STILL_BRANDS or brand in _AUDIO_BRANDS:
            return None
        return "mov" if brand == b"qt  " else "mp4"
    if len(data) >= 8 and data[4:8] in _QUICKTIME_ATOMS:
        return "mov"
    if data.startswith(_EBML_MAGIC):
        for element, start, end in _ebml(data, 0, len(data)):
            if element == 0x1A45DFA3:  # the EBML header; its DocType says webm or matroska
                for child, c_start, c_end in _ebml(data, start, end):
                    if child == 0x4282:
                        return _DOCTYPES.get(data[c_start:c_end].rstrip(b"\0").decode("latin-1"))
            break
    return None


def _not_a_video(data: bytes) -> str:
    """What a file that is no accepted video seems to be ("a PNG image", "AVI video"), or ""."""
    if len(data) >= 12 and data[4:8] == b"ftyp":
        return "an HEIF/AVIF image" if data[8:12] in _STILL_BRANDS else "an M4A audio file"
    if data.startswith(_EBML_MAGIC):
        return "a Matroska file of an unknown kind"
    if len(data) > 188 and data[0] == data[188] == 0x47:
        return "MPEG-TS video"
    return next((what for offset, magic, what in _SIGNATURES if data[offset:offset + len(magic)] == magic), "")


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
    tracks = _track_kinds(data, container)
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


def _track_kinds(data: bytes, container: str) -> frozenset[str] | None:
    """The kinds of track ("video", "audio", ...) the container lists, or None when they cannot be read
    from it (a damaged file, a Matroska file with its tracks after its clusters)."""
    kinds: list[str] = []
    if container in ("mp4", "mov"):
        handlers = {b"vide": "video", b"soun": "audio"}
        for moov, m_start, m_end in _boxes(data, 0, len(data)):
            if moov != b"moov":
                continue
            for trak, t_start, t_end in _boxes(data, m_start, m_end):
                if trak != b"trak":
                    continue
                for mdia, d_start, d_end in _boxes(data, t_start, t_end):
                    for hdlr, h_start, h_end in _boxes(data, d_start, d_end) if mdia == b"mdia" else ():
                        if hdlr == b"hdlr" and h_end - h_start >= 12:
                            kinds.append(handlers.get(data[h_start + 8:h_start + 12], "other"))
            return frozenset(kinds)
        return None
    types = {1: "video", 2: "audio"}
    for segment, s_start, s_end in _ebml(data, 0, len(data)):
        if segment != 0x18538067:
            continue
        for tracks, t_start, t_end in _ebml(data, s_start, s_end):
            if tracks != 0x1654AE6B:
                continue
            for entry, e_start, e_end in _ebml(data, t_start, t_end):
                for child, c_start, c_end in _ebml(data, e_start, e_end) if entry == 0xAE else ():
                    if child == 0x83:
                        kinds.append(types.get(int.from_bytes(data[c_start:c_end], "big"), "other"))
            return frozenset(kinds)
    return None


def _boxes(data: bytes, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """(type, payload start, payload end) of each ISO-BMFF box in ``data[start:end]``; stops at a bad one."""
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, pos)
        head = 8
        if size == 1 and pos + 16 <= end:
            size, head = struct.unpack_from(">Q", data, pos + 8)[0], 16
        elif size == 0:
            size = end - pos
        if size < head:
            return
        yield kind, pos + head, min(pos + size, end)
        pos += size


def _ebml(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(element ID, payload start, payload end) of each EBML element in ``data[start:end]``; an element of
    unknown size runs to ``end`` and is the last; stops at a malformed one."""
    pos = start
    while pos < end:
        element, n = _vint(data, pos, end, keep_marker=True)
        size, m = _vint(data, pos + n, end, keep_marker=False)
        if not n or not m:
            return
        body = pos + n + m
        if size == (1 << (7 * m)) - 1:  # all value bits set: unknown size (a live recording's Segment)
            yield element, body, end
            return
        yield element, body, min(body + size, end)
        pos = body + size


def _vint(data: bytes, pos: int, end: int, keep_marker: bool) -> tuple[int, int]:
    """An EBML variable-length integer at ``pos``: (value, its length), or (0, 0) when there is none."""
    if pos >= end or data[pos] == 0:
        return 0, 0
    length = 9 - data[pos].bit_length()
    if pos + length > end:
        return 0, 0
    value = int.from_bytes(data[pos:pos + length], "big")
    return (value if keep_marker else value & ((1 << (7 * length)) - 1)), length
