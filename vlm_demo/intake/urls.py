"""Image and video URLs, the guarded way in: ``data:`` URLs are decoded here; ``http(s)`` URLs are fetched
only when the settings allow it, from allow-listed hosts, never from an internal address.

Rules for a fetched URL (each redirect is checked the same way, as a new URL):
no backslashes, spaces, control characters or user-info (``user@host``); scheme ``http`` or ``https``;
host name on ``Settings.url_allowed_hosts``; every address the name resolves to is a global unicast
address (IPv4 embedded in IPv6 is unwrapped and checked too); the connection goes to the checked
address itself (no second DNS lookup to rebind); the body is capped at ``Settings.url_max_bytes``
and the whole fetch at ``Settings.url_timeout_s``. The bytes then go through ``intake.load_image`` or
``intake.load_video``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from urllib.parse import SplitResult, unquote_to_bytes, urljoin, urlsplit

import httpx
from PIL import Image

from ..errors import InputError
from ..settings import Settings
from .audio import Audio, is_audio_name, load_audio
from .documents import DocumentOptions, Page, is_document_name, load_document
from .images import load_image
from .video import Video, is_video_name, load_video

Resolver = Callable[[str, int], list[str]]
"""Host name and port -> IP address strings (``socket.getaddrinfo`` unless a test patches it)."""

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_DATA_URL = re.compile(r"data:(?P<type>[^,;]*)(?P<params>(?:;[^,;]*)*),(?P<data>.*)", re.DOTALL | re.IGNORECASE)


def is_url(text: str) -> bool:
    """True for text that names a URL (``scheme:...``) rather than a local file."""
    return bool(re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", text.strip())) and not re.match(r"[A-Za-z]:[\\/]", text)


def resolve_host(host: str, port: int) -> list[str]:
    """All addresses ``host`` resolves to, as the operating system's resolver says."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


#: Hooks the tests replace: name resolution, and the HTTP transport (to reach their 127.0.0.1 servers).
RESOLVE: Resolver = resolve_host


def _no_transport() -> httpx.AsyncBaseTransport | None:
    return None  # httpx's own


TRANSPORT: Callable[[], httpx.AsyncBaseTransport | None] = _no_transport


async def load_image_url(url: str, settings: Settings) -> Image.Image:
    """The image at ``url`` (``data:`` or allowed ``http(s)``), decoded and checked like an upload, in a worker
    thread (a large picture would otherwise hold up every other user's stream)."""
    url = url.strip()
    shown = _short(url)
    if url[:5].lower() == "data:":
        return await asyncio.to_thread(lambda: load_image(decode_data_url(url, settings), settings, name=shown))
    data = await fetch(url, settings)
    return await asyncio.to_thread(load_image, data, settings, name=shown)


async def load_video_url(url: str, settings: Settings) -> Video:
    """The video at ``url`` (``data:video/...`` or allowed ``http(s)``), probed and checked like an upload, in
    a worker thread (checking decodes every frame once)."""
    url = url.strip()
    shown = _short(url)
    if url[:5].lower() == "data:":
        return await asyncio.to_thread(lambda: load_video(decode_data_url(url, settings, "video"), settings, shown))
    data = await fetch(url, settings, "video")
    return await asyncio.to_thread(load_video, data, settings, shown)


async def load_audio_url(url: str, settings: Settings) -> Audio:
    """The clip at ``url`` (``data:audio/...`` or allowed ``http(s)``), decoded and checked like an upload, in a
    worker thread (decoding and checking a long clip takes a while)."""
    url = url.strip()
    shown = _short(url)
    if url[:5].lower() == "data:":
        return await asyncio.to_thread(lambda: load_audio(decode_data_url(url, settings, "audio"), settings, shown))
    data = await fetch(url, settings, "audio")
    return await asyncio.to_thread(load_audio, data, settings, shown)


def is_audio_url(url: str) -> bool:
    """True for a ``data:audio/...`` URL and for any other URL whose path ends in a clip's suffix (``.wav``, ``.mp3``,
    ...; any case). Nothing is fetched: the bytes are decoded later all the same."""
    text = url.strip()
    if text[:5].lower() == "data:":
        return text[5:11].lower() == "audio/"
    try:
        return is_audio_name(urlsplit(text).path)
    except ValueError:
        return False


async def load_document_url(url: str, settings: Settings, documents: DocumentOptions) -> tuple[Page, ...]:
    """The pages ``documents`` names of the PDF at ``url`` (``data:application/pdf`` or allowed ``http(s)``),
    rasterised and checked like an upload, in a worker thread."""
    url = url.strip()
    if url[:5].lower() == "data:":
        data, name = decode_data_url(url, settings, "document"), "the PDF"
    else:
        data, name = await fetch(url, settings, "document"), Path(urlsplit(url).path).name or _short(url)
    return await asyncio.to_thread(load_document, data, settings, documents, name)


def is_document_url(url: str) -> bool:
    """True for a ``data:application/pdf`` URL and for any other URL whose path ends in ``.pdf`` (any case)."""
    text = url.strip()
    if text[:5].lower() == "data:":
        return text[5:20].lower() == "application/pdf"
    try:
        return is_document_name(urlsplit(text).path)
    except ValueError:
        return False


def is_video_url(url: str) -> bool:
    """True for a ``data:video/...`` URL and for any other URL whose path ends in a video suffix (``.mp4``,
    ``.webm``, ``.mov``, ``.mkv``, any case; the query is not looked at). Nothing is fetched: the bytes are
    sniffed later all the same, so a misnamed file is refused, not misread."""
    text = url.strip()
    if text[:5].lower() == "data:":
        return text[5:11].lower() == "video/"
    try:
        return is_video_name(urlsplit(text).path)
    except ValueError:
        return False


def decode_data_url(url: str, settings: Settings, kind: UrlKind = "image") -> bytes:
    """The bytes of a ``data:<kind>/...;base64,...`` URL (``kind`` "image", "video" or "document":
    ``data:application/pdf``), at most ``max_upload_bytes`` for an image or a document and ``max_video_bytes`` for a
    video; anything else is refused."""
    cap = {"video": settings.max_video_bytes, "audio": settings.max_audio_bytes}.get(kind, settings.max_upload_bytes)
    if len(url) > cap * 4 // 3 + 1024:
        raise InputError(f"data: URL is larger than {cap:,} bytes")
    match = _DATA_URL.fullmatch(url.strip())
    if match is None:
        example = {"video": "video/mp4", "audio": "audio/wav", "document": "application/pdf"}.get(kind, "image/png")
        raise InputError(f"malformed data: URL (expected data:{example};base64,...)")
    media_type = match["type"].strip().lower()
    if not media_type.startswith(MEDIA_TYPES[kind]):
        accepted = MEDIA_TYPES[kind] + ("*" if MEDIA_TYPES[kind].endswith("/") else "")
        raise InputError(f"data: URL has media type {media_type or '(none)'!r}; only {accepted} is accepted")
    if "base64" in (p.strip().lower() for p in match["params"].split(";")):
        try:
            return base64.b64decode(re.sub(r"\s+", "", match["data"]), validate=True)
        except (binascii.Error, ValueError):
            raise InputError("malformed data: URL (its base64 payload does not decode)") from None
    return unquote_to_bytes(match["data"])


MEDIA_TYPES = {"image": "image/", "video": "video/", "audio": "audio/", "document": "application/pdf"}
"""What a ``data:`` URL's media type begins with, and a fetch accepts, per kind of attachment."""
UrlKind = Literal["image", "video", "audio", "document"]


async def fetch(url: str, settings: Settings, kind: UrlKind = "image") -> bytes:
    """GET ``url`` under the module's rules; the body, or ``InputError`` saying which rule refused it.
    ``kind`` only words the request's ``Accept`` header and the messages; the rules are the same."""
    check_url(url, settings, kind)  # syntax, scheme, "fetching is off" and host rules first, before any timeout
    try:
        async with asyncio.timeout(settings.url_timeout_s):
            return await _fetch(url, settings, kind)
    except TimeoutError:
        raise InputError(f"{_short(url)}: no complete answer within {settings.url_timeout_s:g} s") from None


async def _fetch(url: str, settings: Settings, kind: str) -> bytes:
    limits = httpx.Timeout(settings.url_timeout_s)
    async with httpx.AsyncClient(transport=TRANSPORT(), trust_env=False, follow_redirects=False,
                                 timeout=limits) as client:
        for hop in range(settings.url_max_redirects + 1):
            parts = check_url(url, settings, kind)
            address = await _checked_address(parts)
            host = parts.hostname or ""
            netloc = f"[{address}]" if ":" in address else address
            if parts.port is not None:
                netloc += f":{parts.port}"
            target = parts._replace(netloc=netloc).geturl()
            accept = MEDIA_TYPES[kind] + ("*" if MEDIA_TYPES[kind].endswith("/") else "")
            headers = {"Host": parts.netloc, "Accept": accept, "User-Agent": "vlm-demo"}
            try:
                async with client.stream("GET", target, headers=headers, extensions={"sni_hostname": host}) as resp:
                    if resp.is_redirect:
                        if hop == settings.url_max_redirects:
                            raise InputError(f"{_short(url)}: too many redirects (limit {settings.url_max_redirects})")
                        url = urljoin(url, resp.headers.get("location", ""))
                        continue
                    if resp.status_code != 200:
                        raise InputError(f"{_short(url)}: the server answered {resp.status_code} {resp.reason_phrase}")
                    return await _body(resp, url, settings.url_max_bytes, kind)
            except httpx.HTTPError as exc:
                raise InputError(f"{_short(url)}: cannot fetch ({type(exc).__name__}: {exc})") from None
    raise AssertionError("unreachable")


async def _body(resp: httpx.Response, url: str, cap: int, kind: str) -> bytes:
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise InputError(f"{_short(url)}: the {kind} is {int(declared):,} bytes; the limit is {cap:,}")
    body = bytearray()
    async for chunk in resp.aiter_raw():  # raw: a compressed body cannot expand past the cap unseen
        body += chunk
        if len(body) > cap:
            raise InputError(f"{_short(url)}: the body goes on past the {cap:,}-byte limit")
    if resp.headers.get("content-encoding", "identity").lower() not in ("identity", ""):
        raise InputError(f"{_short(url)}: compressed bodies ({resp.headers['content-encoding']}) are not accepted")
    return bytes(body)


def check_url(url: str, settings: Settings, kind: str = "image") -> SplitResult:
    """Syntax and host rules of one URL (no network); the parsed URL, or ``InputError``."""
    shown = _short(url)
    if "\\" in url or any(ord(c) <= 32 or ord(c) == 127 for c in url):
        raise InputError(f"{shown}: URLs with backslashes, spaces or control characters are refused")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise InputError(f"{shown}: malformed URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        what = f"{scheme}:// URLs" if scheme else "paths"
        raise InputError(f"{shown}: {what} are refused; give an http(s) or data: URL, or upload the file")
    if not settings.url_fetch:
        raise InputError(f"fetching {kind} URLs is off on this server (VLM_DEMO_URL_FETCH); upload the {kind} instead")
    if "@" in parts.netloc:
        raise InputError(f"{shown}: URLs with a user name or password (user@host) are refused")
    host = (parts.hostname or "").rstrip(".")
    allowed = {h.lower().rstrip(".") for h in settings.url_allowed_hosts}
    if not host or host not in allowed:
        listed = ", ".join(sorted(allowed)) or "none"
        raise InputError(f"{shown}: host {host or '(none)'!r} is not on the allowed list ({listed})")
    return parts


async def _checked_address(parts: SplitResult) -> str:
    """The first address of the URL's host, once every address it resolves to is checked."""
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    try:
        addresses = await asyncio.to_thread(RESOLVE, host, port)
    except (OSError, UnicodeError) as exc:
        raise InputError(f"cannot resolve {host} ({exc})") from None
    if not addresses:
        raise InputError(f"cannot resolve {host}")
    for address in addresses:
        reason = internal_reason(address)
        if reason:
            raise InputError(f"{host} resolves to {address}, {reason}; refused")
    return addresses[0]


def internal_reason(address: str) -> str | None:
    """Why ``address`` must not be contacted (loopback, private, ...), or None for a public address."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            inner = internal_reason(str(embedded))
            if inner:
                return f"{inner} inside an IPv6 address"
    for test, reason in (("is_loopback", "a loopback address"), ("is_unspecified", "an unspecified address"),
                         ("is_link_local", "a link-local address"), ("is_multicast", "a multicast address"),
                         ("is_private", "a private address"), ("is_reserved", "a reserved address")):
        if getattr(ip, test):
            return reason
    if not ip.is_global:
        return "not a public address"
    return None


def _short(url: str, limit: int = 80) -> str:
    return url if len(url) <= limit else url[: limit - 1] + "…"
