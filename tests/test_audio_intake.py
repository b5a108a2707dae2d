"""Audio intake without an engine: a clip in every format taken (WAV, FLAC, Ogg Vorbis and Opus, MP3, M4A/AAC, a
microphone's WebM) decodes to the same sound, mixed to mono at its own rate, and is resampled to a model's rate with
soxr; every bad clip (not audio, truncated, damaged, silent of samples, too long, too large, too many channels, a
rate out of range, a video without sound) is refused with one line naming it and the limit; a front end's sources
count clips as audio and a model that hears nothing refuses them by name."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
import soundfile as sf

from vlm_demo.errors import InputError
from vlm_demo.intake import Audio, by_modality, is_audio_name, load_audio, load_file
from vlm_demo.service.asking import Source, check_counts
from vlm_demo.settings import Settings

SETTINGS = Settings()
TONE_HZ = 440.0


def tone(seconds: float, rate: int, channels: int = 1, amplitude: float = 0.5) -> np.ndarray:
    """A 440 Hz sine, ``channels`` copies (frames x channels), float32."""
    t = np.arange(int(seconds * rate)) / rate
    wave = (amplitude * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32)
    return np.repeat(wave[:, None], channels, axis=1)


def written(fmt: str, subtype: str | None, seconds: float = 2.0, rate: int = 48_000, channels: int = 2) -> bytes:
    """A tone as libsndfile writes it."""
    out = io.BytesIO()
    sf.write(out, tone(seconds, rate, channels), rate, format=fmt, subtype=subtype)
    return out.getvalue()


def encoded(container: str, codec: str, seconds: float = 2.0, rate: int = 48_000, channels: int = 2,
            video: bool = False) -> bytes:
    """A tone as FFmpeg (PyAV) encodes it into ``container`` (with a picture track where ``video``)."""
    out = io.BytesIO()
    with av.open(out, mode="w", format=container) as box:
        if video:
            picture = box.add_stream("mpeg4", rate=4)
            picture.width, picture.height, picture.pix_fmt = 32, 32, "yuv420p"
        sound = box.add_stream(codec, rate=rate, layout="stereo" if channels == 2 else "mono")
        samples = tone(seconds, rate, channels).T.copy()  # planar: channels x samples
        step = sound.codec_context.frame_size or 1024
        for start in range(0, samples.shape[1], step):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples[:, start:start + step]), format="fltp",
                                               layout=sound.layout.name)
            frame.sample_rate = rate
            for packet in sound.encode(frame):
                box.mux(packet)
        for packet in sound.encode(None):
            box.mux(packet)
        if video:
            for i in range(8):
                image = av.VideoFrame.from_ndarray(np.full((32, 32, 3), i * 30, np.uint8), format="rgb24")
                for packet in picture.encode(image):
                    box.mux(packet)
            for packet in picture.encode(None):
                box.mux(packet)
    return out.getvalue()


def peak_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


CLIPS = {
    "clip.wav": lambda: written("WAV", "PCM_16"),
    "clip.flac": lambda: written("FLAC", "PCM_16", rate=44_100),
    "clip.ogg": lambda: written("OGG", "VORBIS"),
    "clip.opus": lambda: written("OGG", "OPUS"),
    "clip.mp3": lambda: written("MP3", "MPEG_LAYER_III", rate=44_100),
    "clip.m4a": lambda: encoded("ipod", "aac", rate=44_100),
    "recording.webm": lambda: encoded("webm", "libopus"),
}
"""Every format taken, as a person's files are: (name, bytes)."""


@pytest.mark.parametrize("name", CLIPS)
def test_every_format_decodes_to_the_same_sound(name, tmp_path):
    path = tmp_path / name
    path.write_bytes(CLIPS[name]())
    (clip,) = asyncio.run(load_file(path, SETTINGS, name=name))  # (as the page's upload: by its own name)
    assert isinstance(clip, Audio) and clip.name == name and clip.channels == 2
    assert clip.format == {"opus": "ogg"}.get(name.rsplit(".", 1)[1], name.rsplit(".", 1)[1]), clip.format
    assert clip.samples.ndim == 1 and clip.samples.dtype == np.float32
    assert 1.95 <= clip.duration_s <= 2.1, clip.duration_s  # (lossy codecs pad a frame)
    assert abs(peak_hz(clip.samples, clip.rate) - TONE_HZ) < 5
    rms = float(np.sqrt(np.mean(clip.samples ** 2)))
    assert 0.3 < rms < 0.4, f"the mono mix keeps the level (a 0.5 sine: 0.354 RMS): {rms}"
    # a model's rate: soxr, once per rate
    at = clip.at(16_000)
    assert abs(len(at) - round(clip.duration_s * 16_000)) <= 2 and at.dtype == np.float32
    assert abs(peak_hz(at, 16_000) - TONE_HZ) < 5 and clip.at(16_000) is at
    assert clip.at(clip.rate) is clip.samples
    assert clip.data_url().startswith("data:audio/")


def test_names_and_counting():
    assert is_audio_name("A.WAV") and is_audio_name("talk.m4a") and not is_audio_name("clip.webm")
    assert Source("x/talk.mp3", "upload").modality() == "audio"
    assert Source("https://example.com/a.flac?x=1", "url").modality() == "audio"
    assert Source("recording.webm", "upload", "audio").modality() == "audio"
    with pytest.raises(InputError, match=r"^3 audio clips in one message; the limit is 2$"):
        check_counts([Source(f"{i}.wav") for i in range(3)], SETTINGS)
    clip = load_audio(written("WAV", "PCM_16"), SETTINGS)
    assert by_modality([clip])["audio"] == (clip,) and "image" not in by_modality([clip])


def no_samples() -> bytes:
    out = io.BytesIO()
    sf.write(out, np.zeros((0, 1), np.float32), 16_000, format="WAV", subtype="PCM_16")
    return out.getvalue()


BAD = {
    "not audio": (lambda: b"hello, this is text", {}, r"^clip\.wav: is not a clip this app reads \(WAV, FLAC, "
                  r"Ogg/Opus, MP3, M4A/AAC or WebM\)$"),
    "truncated WAV": (lambda: written("WAV", "PCM_16")[:100_000], {},
                      r"^clip\.wav: is truncated \(0\.5 of 2\.0 s are there\)$"),
    "damaged M4A": (lambda: encoded("ipod", "aac")[:3000] + bytes(5000), {}, r"^clip\.wav: (cannot be decoded "
                    r"\(truncated or damaged\?\)|is not a clip this app reads .*)$"),
    "no samples": (no_samples, {}, r"^clip\.wav: holds no sound \(0 samples\)$"),
    "too long": (lambda: written("WAV", "PCM_16", seconds=3.0), {"max_audio_seconds": 2.5},
                 r"^clip\.wav: is 3\.0 s long; the limit is 2\.5 s$"),
    "too long, FFmpeg's": (lambda: encoded("ipod", "aac", seconds=3.0), {"max_audio_seconds": 1.0},
                           r"^clip\.wav: is over 1 s long; the limit is 1 s$"),
    "too large": (lambda: written("WAV", "PCM_16"), {"max_audio_bytes": 1000},
                  r"^clip\.wav: file is larger than 1,000 bytes$"),
    "too many channels": (lambda: written("WAV", "PCM_16"), {"max_audio_channels": 1},
                          r"^clip\.wav: has 2 channels; the limit is 1$"),
    "rate too low": (lambda: written("WAV", "PCM_16", rate=4_000), {},
                     r"^clip\.wav: is sampled at 4,000 Hz; this app takes 8,000 to 192,000 Hz$"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_clips_are_refused_in_one_line(case, tmp_path):
    make, changes, message = BAD[case]
    path = tmp_path / "clip.wav"
    path.write_bytes(make())
    with pytest.raises(InputError, match=message) as refused:
        asyncio.run(load_file(path, dataclasses.replace(SETTINGS, **changes), name="clip.wav"))
    assert "\n" not in str(refused.value)


def test_a_video_without_sound_is_no_clip(tmp_path):
    """A video asked for as a clip (``--audio``) with no sound track says so; one with sound gives its sound."""
    path = tmp_path / "silent.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 4, (32, 32))
    for i in range(4):
        writer.write(np.full((32, 32, 3), i * 50, np.uint8))
    writer.release()
    with pytest.raises(InputError, match=r"^silent\.mp4: has no sound track \(a video without sound\)$"):
        asyncio.run(load_file(path, SETTINGS, "audio", name="silent.mp4"))
    talking = tmp_path / "talking.mp4"
    talking.write_bytes(encoded("mp4", "aac", video=True))
    (clip,) = asyncio.run(load_file(talking, SETTINGS, "audio", name="talking.mp4"))
    assert abs(peak_hz(clip.samples, clip.rate) - TONE_HZ) < 5 and clip.format == "m4a"


def test_a_model_that_hears_nothing_refuses_a_clip_by_name(registry):
    """The modality-keyed checks: a clip sent to a picture model is refused before anything renders."""
    from vlm_demo import profile
    from vlm_demo.service import ChatRequest, Turn
    from vlm_demo.service.checks import check_request

    clip = load_audio(written("WAV", "PCM_16"), SETTINGS, name="talk.wav")
    request = ChatRequest(model="tiny-qwen2.5-vl", turns=(Turn("user", "What is said?", {"audio": (clip,)}),))
    with pytest.raises(InputError, match=r"^tiny-qwen2\.5-vl does not take audio \(it takes: image, video\); "
                       r"pick a model that does$"):
        check_request(request, profile.Profiles(registry).get("tiny-qwen2.5-vl"), SETTINGS)


def test_the_cli_takes_audio(tmp_path):
    """``--audio`` reaches the intake: a missing file and a clip for a picture model each in one stderr line."""
    from tests.conftest import run_cli

    missing = run_cli("inspect", "--model", "tiny-qwen2.5-vl", "--audio", str(tmp_path / "none.wav"), "--text", "Hi")
    assert missing.returncode == 1 and missing.stderr.strip().splitlines()[-1].endswith(
        f"cannot read {tmp_path / 'none.wav'}: No such file or directory"), missing.stderr[-500:]
    clip = tmp_path / "talk.wav"
    clip.write_bytes(written("WAV", "PCM_16"))
    heard = run_cli("inspect", "--model", "tiny-qwen2.5-vl", "--audio", str(clip), "--text", "What is said?")
    assert heard.returncode == 1 and "Traceback" not in heard.stderr, heard.stderr[-2000:]
    assert heard.stderr.strip().splitlines()[-1].endswith("tiny-qwen2.5-vl does not take audio (it takes: image, "
                                                         "video); pick a model that does"), heard.stderr[-500:]


def test_a_clip_by_url_and_by_data_url(monkeypatch, settings):
    """A clip given as a URL (the page's URL box, the API) or a ``data:audio/...`` URL: fetched under the URL rules and
    decoded as an upload; a data: URL that is not audio, or over the byte limit, is refused in one line."""
    import base64

    from vlm_demo.intake import is_audio_url, load_url

    from .intake_servers import local_internet, url_settings, wav_bytes

    data = "data:audio/wav;base64," + base64.b64encode(wav_bytes()).decode()
    assert is_audio_url(data) and is_audio_url("https://images.example.com/a/talk.WAV?x=1")
    assert not is_audio_url("https://images.example.com/talk.mp4")
    (clip,) = asyncio.run(load_url(data, settings))
    assert isinstance(clip, Audio) and (clip.rate, round(clip.duration_s, 2)) == (44_100, 2.0)
    assert Source(data, "url").modality() == "audio"
    with local_internet(monkeypatch):
        (fetched,) = asyncio.run(load_url("http://images.example.com/talk.wav", url_settings(settings)))
    assert fetched.data == clip.data and fetched.name == "http://images.example.com/talk.wav"
    with pytest.raises(InputError, match=r"^data: URL has media type 'image/png'; only audio/\* is accepted$"):
        asyncio.run(load_url("data:image/png;base64,AAAA", settings, "audio"))
    small = dataclasses.replace(settings, max_audio_bytes=1000)
    with pytest.raises(InputError, match="data: URL is larger than 1,000 bytes"):
        asyncio.run(load_url(data, small))
