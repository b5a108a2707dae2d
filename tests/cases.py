"""Inputs that several test modules share: odd and hostile files and URLs for the intake (issue 5's cases, each
with the words of its refusal), the test clip and a question about it."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from PIL import Image

from vlm_demo import families
from vlm_demo.registry import load_registry
from vlm_demo.service import ChatRequest, Turn
from vlm_demo.settings import Settings

from .conftest import ROOT
from .intake_servers import png_bytes

CLIP = ROOT / "assets" / "moving-square.webm"
"""A 4-s, 12-fps clip of a square moving right."""


def encoded(image: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def declared_only_png(width: int, height: int) -> bytes:
    """A valid PNG header declaring ``width`` x ``height`` with almost no pixel data: a bomb's shape."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + chunk(b"IEND", b""))


def animated_gif() -> bytes:
    frames = [Image.new("P", (40, 30), i) for i in (1, 2, 3)]
    for frame, colour in zip(frames, ((255, 0, 0), (0, 255, 0), (0, 0, 255)), strict=True):
        frame.putpalette([0, 0, 0, *colour] * 128)
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return buf.getvalue()


def transparent_rgba() -> bytes:
    image = Image.new("RGBA", (20, 10), (255, 0, 0, 0))
    image.paste((0, 0, 255, 255), (0, 0, 10, 10))
    return encoded(image, "PNG")


def palette_with_transparency() -> bytes:
    image = Image.new("P", (20, 10), 0)
    image.putpalette([10, 20, 30, 0, 200, 0] + [0] * 762)
    image.paste(1, (10, 0, 20, 10))
    return encoded(image, "PNG", transparency=0)


def sixteen_bit() -> bytes:
    image = Image.new("I;16", (16, 8))
    image.paste(65535, (8, 0, 16, 8))
    return encoded(image, "PNG")


ACCEPTED = {
    # name: (bytes, pixel (x, y) -> expected RGB after intake)
    "animated GIF: first frame": (animated_gif, {(5, 5): (255, 0, 0)}),
    "RGBA: transparency onto white": (transparent_rgba, {(15, 5): (255, 255, 255), (5, 5): (0, 0, 255)}),
    "P with transparency": (palette_with_transparency, {(5, 5): (255, 255, 255), (15, 5): (0, 200, 0)}),
    "CMYK JPEG": (lambda: encoded(Image.new("CMYK", (16, 16), (0, 255, 255, 0)), "JPEG", quality=95),
                  {(8, 8): (255, 0, 0)}),
    "16-bit grey PNG": (sixteen_bit, {(2, 2): (0, 0, 0), (12, 2): (255, 255, 255)}),
    "grey + alpha": (lambda: encoded(Image.new("LA", (8, 8), (0, 255)), "PNG"), {(4, 4): (0, 0, 0)}),
    "WebP": (lambda: encoded(Image.new("RGB", (8, 8), (0, 0, 255)), "WEBP", lossless=True), {(4, 4): (0, 0, 255)}),
}


REFUSED = {
    "text renamed .png": (lambda: b"hello, I am a text file\n" * 20, "not an image"),
    "TIFF": (lambda: encoded(Image.new("RGB", (8, 8)), "TIFF"), "TIFF images are not accepted"),
    "SVG": (lambda: b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>', "SVG"),
    "bomb: 100000x100000 declared": (lambda: declared_only_png(100_000, 100_000), "too large"),
    "bomb: just over the pixel limit": (lambda: declared_only_png(8_000, 6_000), "too large"),
    "truncated PNG": (lambda: png_bytes((300, 300))[:200], "broken image"),
    "empty file": (lambda: b"", "not an image"),
}



BAD_URLS = {
    # (1) loopback, private, link-local, cloud metadata
    "loopback": ("http://127.0.0.1:{port}/ok.png", "loopback"),
    "localhost": ("http://localhost:{port}/ok.png", "loopback"),
    "IPv6 loopback": ("http://[::1]:{port}/ok.png", "loopback"),
    "private 10/8": ("http://10.0.0.5/x.png", "private"),
    "cloud metadata": ("http://169.254.169.254/latest/meta-data/", "link-local"),
    "metadata by name": ("http://metadata.google.internal/computeMetadata/v1/", "link-local"),
    "AWS IPv6 metadata": ("http://[fd00:ec2::254]/latest/meta-data/", "private"),
    # (2) redirects from an allowed host to an internal one
    "redirect to private": ("http://images.example.com:{port}/to-internal", "private"),
    "redirect to loopback": ("http://images.example.com:{port}/to-loopback", "loopback"),
    "redirect to metadata": ("http://images.example.com:{port}/to-metadata", "link-local"),
    "redirect to file://": ("http://images.example.com:{port}/to-file", "file:// URLs are refused"),
    "redirect loop": ("http://images.example.com:{port}/loop", "too many redirects"),
    # (3) other spellings of internal addresses, and names that resolve to them
    "decimal 2130706433": ("http://2130706433:{port}/ok.png", "loopback"),
    "hex 0x7f000001": ("http://0x7f000001:{port}/ok.png", "loopback"),
    "octal 0177.0.0.1": ("http://0177.0.0.1:{port}/ok.png", "loopback"),
    "IPv4-mapped IPv6": ("http://[::ffff:127.0.0.1]:{port}/ok.png", "loopback"),
    "name -> mapped IPv6": ("http://mapped.example.com:{port}/ok.png", "loopback"),
    "100.64/10": ("http://100.64.0.1/x.png", "not a public address"),
    "name -> 100.64/10": ("http://cgnat.example.com/x.png", "not a public address"),
    "name -> private": ("http://rebind.example.com:{port}/ok.png", "private"),
    "one private answer of several": ("http://mixed.example.com:{port}/ok.png", "private"),
    "host not allowed": ("http://evil.example.net/ok.png", "not on the allowed list"),
    # (4) backslash and user-info confusion
    "backslash @": ("http://127.0.0.1:8000\\@images.example.com/x.png", "backslash"),
    "user-info": ("http://images.example.com@127.0.0.1:{port}/ok.png", "user name or password"),
    "user:password": ("http://u:p@images.example.com:{port}/ok.png", "user name or password"),
    "space": ("http://images.example.com/ x.png", "spaces"),
    # (5) other schemes and paths
    "file://": ("file:///etc/passwd", "file:// URLs are refused"),
    "ftp://": ("ftp://images.example.com/x.png", "ftp:// URLs are refused"),
    "gopher://": ("gopher://127.0.0.1:6379/_INFO", "gopher:// URLs are refused"),
    "../ path": ("../../etc/passwd", "paths are refused"),
    "absolute path": ("/etc/passwd", "paths are refused"),
    # (6) malformed data: URLs
    "data: no comma": ("data:image/png;base64", "malformed data: URL"),
    "data: bad base64": ("data:image/png;base64,@@@not-base64@@@", "does not decode"),
    "data: not an image type": ("data:text/html;base64,PGgxPmhpPC9oMT4=", "only image/\\* is accepted"),
    "data: image type, text inside": ("data:image/png;base64," + base64.b64encode(b"plain text").decode(),
                                      "not an image"),
    # (7) huge, endless and slow bodies
    "declared huge": ("http://images.example.com:{port}/huge.png", "the limit is 300,000"),
    "endless body": ("http://images.example.com:{port}/endless.png", "past the 300,000-byte limit"),
    "slow body": ("http://images.example.com:{port}/slow.png", "no complete answer within 5 s"),
    "silent server": ("http://images.example.com:{port}/silent.png", "no complete answer within 5 s"),
    "404": ("http://images.example.com:{port}/missing.png", "answered 404"),
}


def video_request(model: str, clip, num_frames: int | None = None, text: str = "Where does the square go?",
                  **extra) -> ChatRequest:
    """A question about ``clip`` with ``num_frames`` sampled: as ``num_frames``, or for a family sampled by rate
    (Qwen-VL: the 12-fps, 4-s clip) as ``fps`` = num_frames / 4."""
    media_io = {}
    if num_frames:
        entry = load_registry(Settings().models_file).get(model.removeprefix("remote-"))  # (an endpoint entry's)
        by_rate = families.get(entry.family).video_sampling == "fps"
        media_io = {"video": {"fps": num_frames / 4} if by_rate else {"num_frames": num_frames}}
    return ChatRequest(model=model, turns=(Turn("user", text, {"video": (clip,)}),), media_io=media_io, **extra)
