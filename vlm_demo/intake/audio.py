"""Audio intake: a clip decoded once (``soundfile``: WAV, FLAC, Ogg Vorbis and Opus, MP3; PyAV's FFmpeg: M4A/AAC,
WebM and the rest; both wheels carry their own libraries, no system FFmpeg), mixed to mono, checked against the
settings' limits and kept at its own rate. A model hears it at its feature extractor's rate (``Audio.at``), resampled
here with soxr (its "HQ" filter: what librosa and vLLM's ``soxr`` method use; fast and band-limited), so vLLM gets
the rate it expects and never resamples: its default resampler, torchaudio, cannot be installed beside this torch,
and a microphone records at 44.1 or 48 kHz."""

from __future__ import annotations

import base64
import functools
import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..settings import Settings

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".m4a", ".aac")
"""File name endings taken for clips. A ``.webm`` file (Chromium's microphone recording) is a clip when its container
lists no video track (``intake.load_file`` asks the container)."""

AUDIO_FORMATS = "WAV, FLAC, Ogg/Opus, MP3, M4A/AAC or WebM"
"""The formats read, as messages name them."""

AUDIO_MIME = {"wav": "audio/wav", "flac": "audio/flac", "ogg": "audio/ogg", "mp3": "audio/mpeg", "m4a": "audio/mp4",
              "aac": "audio/aac", "webm": "audio/webm"}
"""Media type of each format, for ``data:`` URLs (Export's and a remote server's ``audio_url``)."""


@dataclass(frozen=True)
class Audio:
    """One checked clip: its samples, mono, at its own rate, and the file it came from."""

    samples: np.ndarray = field(repr=False, compare=False)
    """The clip mixed to mono, float32 in [-1, 1], at ``rate``."""
    rate: int
    """Samples per second, as the file says (the clip's own rate, before a model's)."""
    channels: int
    """Channels in the file (mixed to one here)."""
    format: str
    """``"wav"``, ``"flac"``, ``"ogg"``, ``"mp3"``, ``"m4a"``, ``"aac"`` or ``"webm"``."""
    data: bytes = field(repr=False, compare=False)
    """The file's own bytes (the clip as Export and a remote server send it)."""
    name: str = "the clip"
    """How messages name it (the file name, or a shortened URL)."""
    _at: dict[int, np.ndarray | str] = field(default_factory=dict, repr=False, compare=False)
    """The clip at each model rate it was asked for, and (keyed by the negated rate) its WAV data URL there."""

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.rate

    @functools.cached_property
    def digest(self) -> str:
        """A name for the file's bytes: equal files get equal names."""
        return hashlib.blake2b(self.data, digest_size=16).hexdigest()

    def at(self, rate: int) -> np.ndarray:
        """The clip at ``rate`` samples a second (a model's feature extractor's), resampled once per rate."""
        if rate == self.rate:
            return self.samples
        if rate not in self._at:
            import soxr

            self._at[rate] = soxr.resample(self.samples, self.rate, rate, quality="HQ").astype(np.float32, copy=False)
        return self._at[rate]

    def wav_data_url(self, rate: int) -> str:
        """The clip at ``rate`` (``at``) as a 16-bit WAV ``data:`` URL: what a model's processor gets (the format
        every audio loader reads, at the rate it expects: nothing for it to resample)."""
        key = -rate  # (kept beside the resampled samples: a conversation sends its clips again every turn)
        if key not in self._at:
            import soundfile as sf

            out = io.BytesIO()
            sf.write(out, self.at(rate), rate, format="WAV", subtype="PCM_16")
            self._at[key] = "data:audio/wav;base64," + base64.b64encode(out.getvalue()).decode("ascii")
        return self._at[key]

    def data_url(self) -> str:
        """The file as a base64 ``data:audio/...`` URL."""
        return f"data:{AUDIO_MIME[self.format]};base64," + base64.b64encode(self.data).decode("ascii")


def is_audio_name(name: str) -> bool:
    """True for a file name (or URL path) that ends in a clip's suffix (any case); ``.webm`` is the container's to
    say."""
    return name.lower().endswith(AUDIO_SUFFIXES)


def load_audio(source: str | Path | bytes, settings: Settings, name: str | None = None) -> Audio:
    """Read, decode and check one clip. Bad input raises ``InputError``, one line naming the clip as ``name``
    (default: the path given, or "the clip") and the limit it broke; nothing else escapes."""
    name = name or (str(source) if isinstance(source, (str, Path)) else "the clip")
    data = _read(source, name, settings)
    samples, rate, channels, fmt = _decode_soundfile(data, name)
    if samples is None:
        samples, rate, channels, fmt = _decode_av(data, name, settings)
    if channels > settings.max_audio_channels:
        raise InputError(f"{name}: has {channels} channels; the limit is {settings.max_audio_channels}")
    if not settings.min_audio_rate <= rate <= settings.max_audio_rate:
        raise InputError(f"{name}: is sampled at {rate:,} Hz; this app takes {settings.min_audio_rate:,} to "
                         f"{settings.max_audio_rate:,} Hz")
    if len(samples) == 0:
        raise InputError(f"{name}: holds no sound (0 samples)")
    seconds = len(samples) / rate
    if seconds > settings.max_audio_seconds:
        raise InputError(f"{name}: is {seconds:.1f} s long; the limit is {settings.max_audio_seconds:g} s")
    mono = samples if samples.ndim == 1 else samples.mean(axis=1)
    return Audio(np.ascontiguousarray(mono, dtype=np.float32), rate, channels, fmt, data, name)


def _read(source: str | Path | bytes, name: str, settings: Settings) -> bytes:
    limit = settings.max_audio_bytes
    if isinstance(source, bytes):
        data = source
    else:
        try:
            if Path(source).stat().st_size > limit:
                raise InputError(f"{name}: file is larger than {limit:,} bytes")
            data = Path(source).read_bytes()
        except OSError as exc:
            raise InputError(f"cannot read {name}: {exc.strerror}") from None
    if len(data) > limit:
        raise InputError(f"{name}: file is larger than {limit:,} bytes")
    return data


SOUNDFILE_FORMATS = {"WAV": "wav", "WAVEX": "wav", "FLAC": "flac", "OGG": "ogg", "MP3": "mp3"}
"""libsndfile's major formats taken (others, AIFF say, go to FFmpeg, which names them)."""


def _decode_soundfile(data: bytes, name: str) -> tuple[np.ndarray | None, int, int, str]:
    """The clip through libsndfile: (frames x channels float32, rate, channels, format), or None first where
    libsndfile does not know the format (FFmpeg then tries). A WAV or FLAC file that ends before its header's
    length is truncated."""
    import soundfile as sf

    try:
        with sf.SoundFile(io.BytesIO(data)) as clip:
            fmt = SOUNDFILE_FORMATS.get(clip.format)
            if fmt is None:
                return None, 0, 0, ""
            expected = clip.frames
            samples = clip.read(dtype="float32", always_2d=True)
            rate, channels = clip.samplerate, clip.channels
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError):
        return None, 0, 0, ""
    expected = max(expected, _wav_frames(data) or 0) if fmt == "wav" else expected
    if fmt in ("wav", "flac") and len(samples) < expected:
        raise InputError(f"{name}: is truncated ({len(samples) / rate:.1f} of {expected / rate:.1f} s are there)")
    return samples, rate, channels, fmt


def _wav_frames(data: bytes) -> int | None:
    """The frames a RIFF WAVE file's header says its data chunk holds (libsndfile counts those the file still has),
    or None where the header cannot say."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos, block_align = 12, 0
    while pos + 8 <= len(data):
        chunk, size = data[pos:pos + 4], int.from_bytes(data[pos + 4:pos + 8], "little")
        if chunk == b"fmt " and pos + 22 <= len(data):
            block_align = int.from_bytes(data[pos + 20:pos + 22], "little")
        if chunk == b"data":
            return size // block_align if block_align and size != 0xFFFFFFFF else None  # (a stream's: unknown)
        pos += 8 + size + (size & 1)
    return None


def _decode_av(data: bytes, name: str, settings: Settings) -> tuple[np.ndarray, int, int, str]:
    """The clip through FFmpeg (PyAV): its first sound track, decoded whole (within the length limit) as float32."""
    import av

    not_audio = InputError(f"{name}: is not a clip this app reads ({AUDIO_FORMATS})")
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.FFmpegError, ValueError, OSError):
        raise not_audio from None
    try:
        stream = next((s for s in container.streams if s.type == "audio"), None)
        if stream is None:
            video = any(s.type == "video" for s in container.streams)
            raise InputError(f"{name}: has no sound track" + (" (a video without sound)" if video else "")) \
                if video else not_audio
        rate, channels = int(stream.rate or 0), int(stream.channels or 0)
        fmt = _av_format(container.format.name, name)
        limit = int(settings.max_audio_seconds * rate) + rate if rate else None
        chunks, total = [], 0
        for frame in container.decode(stream):
            chunk = frame.to_ndarray()  # (channels, n) planar, or (1, n * channels) packed
            chunk = chunk.T if frame.format.is_planar else chunk.reshape(-1, frame.layout.nb_channels)
            chunks.append(_as_float(chunk))
            total += len(chunk)
            if limit and total > limit:  # (a clip over the limit is not decoded to its end)
                raise InputError(f"{name}: is over {settings.max_audio_seconds:g} s long; the limit is "
                                 f"{settings.max_audio_seconds:g} s")
    except av.FFmpegError:
        raise InputError(f"{name}: cannot be decoded (truncated or damaged?)") from None
    finally:
        container.close()
    samples = np.concatenate(chunks) if chunks else np.zeros((0, max(channels, 1)), np.float32)
    return samples, rate, channels or samples.shape[1], fmt


def _av_format(container: str, name: str) -> str:
    """Our name for an FFmpeg demuxer's (``"mov,mp4,m4a,3gp,3g2,mj2"``, ``"matroska,webm"``, ``"aac"``, ...)."""
    names = container.split(",")
    for ours, theirs in (("m4a", "m4a"), ("webm", "webm"), ("aac", "aac"), ("mp3", "mp3"), ("ogg", "ogg"),
                         ("wav", "wav"), ("flac", "flac")):
        if theirs in names:
            return ours
    return "m4a" if name.lower().endswith(".m4a") else names[0]


def _as_float(chunk: np.ndarray) -> np.ndarray:
    """Samples as float32 in [-1, 1] (FFmpeg decodes to floats, or to integers of the codec's width)."""
    if np.issubdtype(chunk.dtype, np.floating):
        return chunk.astype(np.float32, copy=False)
    scale = float(np.iinfo(chunk.dtype).max) + 1.0
    if np.issubdtype(chunk.dtype, np.unsignedinteger):  # (8-bit PCM is unsigned, centred on 128)
        return (chunk.astype(np.float32) - scale / 2) / (scale / 2)
    return chunk.astype(np.float32) / scale
