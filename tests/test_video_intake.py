"""Video intake without an engine: the example clips load; every bad video (an image in disguise, a
truncated, empty, audio-only, huge, long or slow file, a bad data: URL) is refused with one line naming
it; each accepted container (mp4, webm, mov, mkv) loads."""

from __future__ import annotations

import base64
import dataclasses
import struct
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from vlm_demo.intake import urls as fetch
from vlm_demo.errors import InputError
from vlm_demo.intake import Video, is_video_name, is_video_url, load, load_video, load_video_url
from vlm_demo.intake.containers import sniff_video
from vlm_demo.settings import Settings
from .conftest import data_url

ASSETS = Path(__file__).resolve().parent.parent / "assets"
ALLOWED = "use mp4, webm, mov, mkv"


# --- Makers of small videos ------------------------------------------------------------------------------

def written(tmp_path: Path, suffix: str, fourcc: str, size=(64, 48), fps: float = 12, frames: int = 6) -> bytes:
    """A clip written by OpenCV's own FFmpeg writer (moving bands, so every frame differs)."""
    path = tmp_path / f"written{suffix}"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, size)
    assert writer.isOpened(), f"OpenCV cannot write {fourcc} into {suffix}"
    for i in range(frames):
        frame = np.full((size[1], size[0], 3), 255, np.uint8)
        frame[:, (i * 7) % size[0]:][:, :8] = (40, 40, 220)
        writer.write(frame)
    writer.release()
    return path.read_bytes()


def box(kind: bytes, *parts: bytes) -> bytes:
    """One ISO-BMFF box."""
    body = b"".join(parts)
    return struct.pack(">I4s", 8 + len(body), kind) + body


def full_box(kind: bytes, flags: int, *parts: bytes) -> bytes:
    """An ISO-BMFF "full box" (version 0, then 24 bits of flags)."""
    return box(kind, struct.pack(">I", flags), *parts)


def iso_bmff(handler: bytes, entry: bytes, samples: list[bytes], timescale: int = 1000, delta: int = 100) -> bytes:
    """The smallest mp4 with one track (``handler`` b"vide" or b"soun", sample entry ``entry``) holding
    ``samples``, all in one chunk: ftyp, mdat, moov (mvhd, trak: tkhd, mdia: mdhd, hdlr, minf: xmhd, dinf,
    stbl: stsd, stts, stsc, stsz, stco)."""
    n, duration = len(samples), len(samples) * delta
    ftyp = box(b"ftyp", b"isom", struct.pack(">I", 512), b"isomiso2mp41")
    mdat = box(b"mdat", *samples)
    matrix = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
    mvhd = full_box(b"mvhd", 0, struct.pack(">IIII", 0, 0, timescale, duration), struct.pack(">IH", 0x10000, 0x100),
                    bytes(10), matrix, bytes(24), struct.pack(">I", 2))
    width, height = (320, 240) if handler == b"vide" else (0, 0)
    tkhd = full_box(b"tkhd", 3, struct.pack(">IIIII", 0, 0, 1, 0, duration), bytes(8),
                    struct.pack(">HHHH", 0, 0, 0x100 if handler == b"soun" else 0, 0), matrix,
                    struct.pack(">II", width << 16, height << 16))
    mdhd = full_box(b"mdhd", 0, struct.pack(">IIII", 0, 0, timescale, duration), struct.pack(">HH", 0x55C4, 0))
    hdlr = full_box(b"hdlr", 0, bytes(4), handler, bytes(12), b"handler\0")
    media_header = full_box(b"vmhd", 1, bytes(8)) if handler == b"vide" else full_box(b"smhd", 0, bytes(4))
    dinf = box(b"dinf", full_box(b"dref", 0, struct.pack(">I", 1), full_box(b"url ", 1)))
    one = struct.pack(">I", 1 if n else 0)
    stbl = box(b"stbl", full_box(b"stsd", 0, struct.pack(">I", 1), entry),
               full_box(b"stts", 0, one, struct.pack(">II", n, delta) if n else b""),
               full_box(b"stsc", 0, one, struct.pack(">III", 1, n, 1) if n else b""),
               full_box(b"stsz", 0, struct.pack(">II", 0, n), *(struct.pack(">I", len(s)) for s in samples)),
               full_box(b"stco", 0, one, struct.pack(">I", len(ftyp) + 8) if n else b""))
    trak = box(b"trak", tkhd, box(b"mdia", mdhd, hdlr, box(b"minf", media_header, dinf, stbl)))
    return ftyp + mdat + box(b"moov", mvhd, trak)


def pcm_entry(rate: int = 8000) -> bytes:
    """A sample entry for 16-bit little-endian mono PCM ("sowt")."""
    return box(b"sowt", bytes(6), struct.pack(">H", 1), bytes(8), struct.pack(">HHHH", 1, 16, 0, 0),
               struct.pack(">I", rate << 16))


def mp4v_entry(width: int = 320, height: int = 240) -> bytes:
    """A sample entry for MPEG-4 part 2 video ("mp4v", no decoder config)."""
    return box(b"mp4v", bytes(6), struct.pack(">H", 1), bytes(16),
               struct.pack(">HHIIIH", width, height, 0x480000, 0x480000, 0, 1), bytes(32), struct.pack(">Hh", 24, -1))


def audio_only_mp4() -> bytes:
    """An mp4 whose one track is sound: 1 s of 8 kHz PCM in ten samples."""
    return iso_bmff(b"soun", pcm_entry(), [b"\0\1" * 800] * 10)


def empty_track_mp4() -> bytes:
    """An mp4 with one video track and no samples at all."""
    return iso_bmff(b"vide", mp4v_entry(), [])


def ebml(element: int, *parts: bytes) -> bytes:
    """One EBML element (its ID as written, an 8-byte size)."""
    body = b"".join(parts)
    return element.to_bytes((element.bit_length() + 7) // 8, "big") + (0x01 << 56 | len(body)).to_bytes(8, "big") + body


def uint(element: int, value: int) -> bytes:
    return ebml(element, value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


def audio_only_mkv() -> bytes:
    """A Matroska file whose one track is sound (TrackType 2, 8 kHz PCM) and one cluster of it."""
    header = ebml(0x1A45DFA3, uint(0x4286, 1), uint(0x42F7, 1), uint(0x42F2, 4), uint(0x42F3, 8),
                  ebml(0x4282, b"matroska"), uint(0x4287, 4), uint(0x4285, 2))
    info = ebml(0x1549A966, uint(0x2AD7B1, 1_000_000), ebml(0x4D80, b"test"), ebml(0x5741, b"test"))
    audio = ebml(0xE1, ebml(0xB5, struct.pack(">d", 8000.0)), uint(0x9F, 1), uint(0x6264, 16))
    track = ebml(0xAE, uint(0xD7, 1), uint(0x73C5, 1), uint(0x83, 2), ebml(0x86, b"A_PCM/INT/LIT"), audio)
    cluster = ebml(0x1F43B675, uint(0xE7, 0), ebml(0xA3, b"\x81\0\0\x80", b"\0\1" * 800))
    return header + ebml(0x18538067, info, ebml(0x1654AE6B, track), cluster)


def example(suffix: str) -> bytes:
    return (ASSETS / f"moving-square{suffix}").read_bytes()


# --- The example clip ------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix, container", [(".webm", "webm"), (".mp4", "mp4")], ids=["webm", "mp4"])
def test_example_clips_load(suffix, container):
    path = ASSETS / f"moving-square{suffix}"
    assert path.stat().st_size < 200_000
    video = load_video(path, Settings())
    assert (video.container, video.size, video.num_frames, video.fps, video.duration_s) == (
        container, (320, 240), 48, 12.0, 4.0)
    assert video.name == str(path) and video.data == path.read_bytes()
    assert video.data_url().startswith(f"data:video/{container};base64,")
    assert base64.b64decode(video.data_url().split(",", 1)[1]) == video.data
    assert video.digest == load_video(path.read_bytes(), Settings()).digest
    assert "data" not in repr(video)  # the bytes stay out of logs


# --- Accepted containers ---------------------------------------------------------------------------------

ACCEPTED = {
    # id: (suffix, fourcc, sniffed container)
    "webm VP8": (".webm", "VP80", "webm"),
    "webm VP9": (".webm", "VP90", "webm"),
    "mp4 mp4v": (".mp4", "mp4v", "mp4"),
    "mov mp4v": (".mov", "mp4v", "mov"),
    "mkv MJPG": (".mkv", "MJPG", "mkv"),
    "mkv mp4v": (".mkv", "mp4v", "mkv"),
}


@pytest.mark.parametrize("suffix, fourcc, container", list(ACCEPTED.values()), ids=list(ACCEPTED))
def test_containers_are_accepted(suffix, fourcc, container, tmp_path):
    data = written(tmp_path, suffix, fourcc, fps=10, frames=6)
    assert sniff_video(data) == container
    video = load_video(data, Settings(), name=f"clip{suffix}")
    assert (video.container, video.size, video.num_frames, video.fps) == (container, (64, 48), 6, 10.0)
    assert video.duration_s == pytest.approx(0.6)


# --- Refused files ---------------------------------------------------------------------------------------

REFUSED: dict[str, tuple[Callable[[Path], bytes], dict, str]] = {
    # id: (maker of the file's bytes, settings changed, the whole message for a file named clip.mp4)
    "PNG image renamed .mp4": (lambda _: (ASSETS / "shape-a.png").read_bytes(), {},
                               f"clip.mp4: not a video (a PNG image); {ALLOWED}"),
    "JPEG image renamed .mp4": (lambda _: b"\xff\xd8\xff\xe0" + bytes(100), {},
                                f"clip.mp4: not a video (a JPEG image); {ALLOWED}"),
    "text renamed .mp4": (lambda _: b"hello, I am a text file\n" * 20, {}, f"clip.mp4: not a video; {ALLOWED}"),
    "empty file": (lambda _: b"", {}, f"clip.mp4: not a video; {ALLOWED}"),
    "AVI": (lambda tmp: written(tmp, ".avi", "MJPG"), {}, f"clip.mp4: AVI videos are not accepted; {ALLOWED}"),
    "webm when only mp4 is allowed": (lambda _: example(".webm"), {"allowed_video_formats": ("mp4",)},
                                      "clip.mp4: webm videos are not accepted; use mp4"),
    "truncated mp4 (first half)": (lambda _: example(".mp4")[: len(example(".mp4")) // 2], {},
                                   "clip.mp4: cannot be decoded (truncated or damaged?)"),
    "zero frames: a video track with no samples": (lambda _: empty_track_mp4(), {}, "clip.mp4: has no frames"),
    "zero frames: VideoWriter given none (no track at all)": (
        lambda tmp: written(tmp, ".mp4", "mp4v", frames=0), {}, "clip.mp4: has no video track (audio only?)"),
    "audio only: mp4 with one soun track": (lambda _: audio_only_mp4(), {},
                                            "clip.mp4: has no video track (audio only?)"),
    "audio only: Matroska with one audio track": (lambda _: audio_only_mkv(), {},
                                                  "clip.mp4: has no video track (audio only?)"),
    "7680x4320 frames": (lambda tmp: written(tmp, ".mp4", "mp4v", size=(7680, 4320), fps=1, frames=1), {},
                         "clip.mp4: frames are 7680x4320; the limit is 8,294,400 pixels"),
    "8 s when the limit is 5 s": (lambda tmp: written(tmp, ".mp4", "mp4v", size=(16, 16), fps=1, frames=8),
                                  {"max_video_seconds": 5}, "clip.mp4: is 8.0 s long; the limit is 5 s"),
    "over the byte limit": (lambda _: example(".mp4"), {"max_video_bytes": 10_000},
                            "clip.mp4: file is larger than 10,000 bytes"),
    "decoding takes too long": (lambda _: example(".webm"), {"max_video_decode_s": 0},
                                "clip.mp4: took over 0 s to decode; use a shorter or smaller clip"),
}


@pytest.mark.parametrize("make, changes, message", list(REFUSED.values()), ids=list(REFUSED))
def test_bad_videos_are_refused_in_one_line(make, changes, message, tmp_path):
    data = make(tmp_path)
    settings = dataclasses.replace(Settings(), **changes)
    t0 = time.perf_counter()
    with pytest.raises(InputError) as refused:
        load_video(data, settings, name="clip.mp4")
    assert time.perf_counter() - t0 < 2.0
    assert str(refused.value) == message
    assert refused.value.__cause__ is None


def test_paths(tmp_path):
    with pytest.raises(InputError, match=r"^cannot read .*missing\.mp4: No such file or directory$"):
        load_video(tmp_path / "missing.mp4", Settings())
    path = tmp_path / "big.webm"
    path.write_bytes(example(".webm"))
    with pytest.raises(InputError, match=rf"^{path}: file is larger than 1,000 bytes$"):
        load_video(path, dataclasses.replace(Settings(), max_video_bytes=1_000))
    assert load_video(path, Settings()).num_frames == 48


@pytest.mark.parametrize("name, video", [("a.MP4", True), ("b.webm", True), ("c.mov", True), ("d.mkv", True),
                                         ("e.png", False), ("mp4", False), ("f.mp4.txt", False)],
                         ids=lambda v: str(v))
def test_is_video_name(name, video):
    assert is_video_name(name) is video


@pytest.mark.parametrize("data, container", [
    (b"\0\0\0\x1cftypisom" + bytes(16), "mp4"), (b"\0\0\0\x14ftypqt  " + bytes(8), "mov"),
    (b"\0\0\0\x1cftypavif" + bytes(16), None), (b"\0\0\0\x08wide\0\0\0\x08mdat", "mov"),
    (b"\x89PNG\r\n\x1a\n" + bytes(16), None), (b"RIFF\0\0\0\0WEBPVP8 ", None),
], ids=["isom", "qt", "avif image", "QuickTime without ftyp", "png", "webp"])
def test_sniffing(data, container):
    assert sniff_video(data) == container


# --- URLs ------------------------------------------------------------------------------------------------

async def test_data_urls():
    video = await load_video_url(data_url(example(".mp4"), "video/mp4"), Settings())
    assert (video.container, video.num_frames, video.fps) == ("mp4", 48, 12.0)
    webm = await load_video_url(data_url(example(".webm"), "video/webm"), Settings())
    assert (await load_video_url(webm.data_url(), Settings())).digest == webm.digest


BAD_DATA_URLS = {
    "bad base64": ("data:video/mp4;base64,@@@not-base64@@@", {},
                   "malformed data: URL (its base64 payload does not decode)"),
    "text/plain": ("data:text/plain;base64,aGVsbG8=", {},
                   "data: URL has media type 'text/plain'; only video/* is accepted"),
    "an image type": (data_url(b"x", "image/png"), {},
                      "data: URL has media type 'image/png'; only video/* is accepted"),
    "no comma": ("data:video/mp4;base64", {}, "malformed data: URL (expected data:video/mp4;base64,...)"),
    "a PNG inside": (data_url((ASSETS / "shape-a.png").read_bytes(), "video/mp4"), {}, "not a video (a PNG image)"),
    "over the byte limit": (data_url(bytes(30_000), "video/mp4"), {"max_video_bytes": 10_000},
                            "data: URL is larger than 10,000 bytes"),
}


@pytest.mark.parametrize("url, changes, message", list(BAD_DATA_URLS.values()), ids=list(BAD_DATA_URLS))
async def test_bad_data_urls_are_refused(url, changes, message):
    with pytest.raises(InputError) as refused:
        await load_video_url(url, dataclasses.replace(Settings(), **changes))
    assert message in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("url, video", [
    ("data:video/mp4;base64,AAAA", True), (" DATA:Video/webm;base64,AAAA", True), ("data:image/png;base64,AAAA", False),
    ("https://x.example/a/clip.MP4?size=big", True), ("https://x.example/clip.mkv#t=3", True),
    ("https://x.example/clip.png", False), ("https://x.example/?f=clip.mp4", False), ("http://[::1/clip.mp4", False),
], ids=["data:video/mp4", "DATA:Video/webm", "data:image/png", ".MP4 + query", ".mkv + fragment", ".png",
        "suffix only in the query", "malformed"])
def test_is_video_url(url, video):
    assert is_video_url(url) is video


async def test_media_urls_pick_the_loader(monkeypatch):
    picture = data_url((ASSETS / "shape-a.png").read_bytes(), "image/png")
    (clip,) = await load(data_url(example(".mp4"), "video/mp4"), Settings())  # one source, one attachment
    (image,) = await load(picture, Settings())
    assert isinstance(clip, Video) and isinstance(image, Image.Image)
    with pytest.raises(InputError, match="^fetching video URLs is off on this server"):
        await load("https://videos.example.com/clip.MP4?x=1", Settings())
    with pytest.raises(InputError, match="^fetching image URLs is off on this server"):
        await load("https://videos.example.com/clip.png", Settings())

    asked = []

    async def fake_fetch(url, settings, kind="image"):  # http(s) goes through fetch(), with the same rules
        asked.append((url, kind))
        return example(".webm")
    monkeypatch.setattr(fetch, "fetch", fake_fetch)
    (video,) = await load("https://videos.example.com/a/clip.webm", Settings())
    assert isinstance(video, Video) and video.container == "webm" and video.name.endswith("clip.webm")
    assert asked == [("https://videos.example.com/a/clip.webm", "video")]


# --- Settings --------------------------------------------------------------------------------------------

def test_video_settings():
    s = Settings()
    assert s.media_limits("video") == (1, 2) and s.media_limits("image") == (4, 8)
    assert s.max_video_frame_pixels == 3840 * 2160 and s.allowed_video_formats == ("mp4", "webm", "mov", "mkv")
    env = Settings.from_env({"VLM_DEMO_ALLOWED_VIDEO_FORMATS": "mp4, webm", "VLM_DEMO_MAX_VIDEO_SECONDS": "30",
                             "VLM_DEMO_MAX_VIDEOS_PER_TURN": "2"})
    assert env.allowed_video_formats == ("mp4", "webm") and env.max_video_seconds == 30.0
    assert env.media_limits("video") == (2, 2)
