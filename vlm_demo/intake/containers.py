"""Video containers read from their bytes alone (pure parsing, no decoder): which container a file is (ISO-BMFF's
mp4 and mov, EBML's webm and mkv), what else it is when it is none, and the kinds of track it lists."""

from __future__ import annotations

import struct
from collections.abc import Iterator


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


def not_a_video(data: bytes) -> str:
    """What a file that is no accepted video seems to be ("a PNG image", "AVI video"), or ""."""
    if len(data) >= 12 and data[4:8] == b"ftyp":
        return "an HEIF/AVIF image" if data[8:12] in _STILL_BRANDS else "an M4A audio file"
    if data.startswith(_EBML_MAGIC):
        return "a Matroska file of an unknown kind"
    if len(data) > 188 and data[0] == data[188] == 0x47:
        return "MPEG-TS video"
    return next((what for offset, magic, what in _SIGNATURES if data[offset:offset + len(magic)] == magic), "")



def track_kinds(data: bytes, container: str) -> frozenset[str] | None:
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
