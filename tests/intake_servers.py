"""Local stand-ins for the internet, for the URL-intake tests: one HTTP server on 127.0.0.1 that plays
every host, a resolver that maps test host names to addresses, and an HTTP transport that delivers
connections meant for the one public test address to that server. No test reaches any other address."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from PIL import Image

from vlm_demo.intake import urls as fetch
from vlm_demo.settings import Settings

PUBLIC = "93.184.216.34"
"""The address allowed test hosts resolve to; the transport sends its connections to 127.0.0.1."""
HOSTS = {
    "images.example.com": [PUBLIC],
    "cdn.example.com": [PUBLIC, "2606:2800:220:1:248:1893:25c8:1946"],
    "localhost": ["127.0.0.1", "::1"],
    "internal.example.com": ["10.0.0.5"],
    "rebind.example.com": ["192.168.1.20"],
    "mixed.example.com": [PUBLIC, "172.16.0.9"],
    "metadata.google.internal": ["169.254.169.254"],
    "mapped.example.com": ["::ffff:127.0.0.1"],
    "cgnat.example.com": ["100.64.0.1"],
}
ALLOWED = (*HOSTS, "127.0.0.1", "2130706433", "0x7f000001", "169.254.169.254", "10.0.0.5", "100.64.0.1",
           "[::ffff:127.0.0.1]", "::ffff:127.0.0.1", "::1", "fd00:ec2::254", "0177.0.0.1")


def resolve(host: str, port: int) -> list[str]:
    """Numeric hosts as the C library reads them (decimal, hex, octal, IPv6); test names from HOSTS."""
    with contextlib.suppress(socket.gaierror):
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        return list(dict.fromkeys(i[4][0] for i in infos))
    if host in HOSTS:
        return HOSTS[host]
    raise socket.gaierror(socket.EAI_NONAME, f"test resolver: unknown host {host}")


def png_bytes(size=(64, 48), colour=(200, 40, 40)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


def wav_bytes(seconds: float = 2.0, rate: int = 44_100) -> bytes:
    """A short clip: a 440-Hz tone, 16-bit WAV, mono."""
    import numpy as np
    import soundfile as sf

    out = io.BytesIO()
    sf.write(out, 0.3 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * rate)) / rate), rate, format="WAV")
    return out.getvalue()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        path, port = self.path, self.server.server_address[1]
        routes = {
            "/ok.png": lambda: self._send(200, png_bytes(), {"Content-Type": "image/png"}),
            "/talk.wav": lambda: self._send(200, wav_bytes(), {"Content-Type": "audio/wav"}),
            "/to-ok": lambda: self._send(302, headers={"Location": "/ok.png"}),
            "/to-internal": lambda: self._send(302, headers={"Location": "http://internal.example.com/x.png"}),
            "/to-loopback": lambda: self._send(302, headers={"Location": f"http://127.0.0.1:{port}/ok.png"}),
            "/to-metadata": lambda: self._send(
                301, headers={"Location": "http://169.254.169.254/latest/meta-data/iam/security-credentials/"}),
            "/to-file": lambda: self._send(307, headers={"Location": "file:///etc/passwd"}),
            "/loop": lambda: self._send(302, headers={"Location": "/loop"}),
            "/missing.png": lambda: self._send(404, b"not here"),
            "/huge.png": self._huge,
            "/endless.png": self._endless,
            "/slow.png": self._slow,
            "/silent.png": lambda: time.sleep(30),
        }
        routes.get(path, lambda: self._send(404))()

    def _huge(self):
        self.send_response(200)
        self.send_header("Content-Length", str(10**10))
        self.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(10_000):
                self.wfile.write(b"\0" * 65536)

    def _endless(self):
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(100_000):
                self.wfile.write(b"10000\r\n" + b"\0" * 65536 + b"\r\n")

    def _slow(self):
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(300):
                self.wfile.write(b"\0")
                self.wfile.flush()
                time.sleep(0.1)


class LoopbackTransport(httpx.AsyncHTTPTransport):
    """Delivers requests for the public test address to the local server; refuses every other address."""

    def __init__(self, port: int, seen: list[str]):
        super().__init__()
        self.port = port
        self.seen = seen
        """Every URL a connection was asked for, across fetches."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(str(request.url))
        if request.url.host != PUBLIC:
            raise AssertionError(f"the fetcher tried to connect to {request.url.host}, a refused address")
        request.url = request.url.copy_with(host="127.0.0.1", port=self.port)
        return await super().handle_async_request(request)


@dataclasses.dataclass
class Internet:
    """The local server, its port, and the transport the fetcher used."""

    port: int
    seen: list[str]
    """URLs the fetcher connected to (after its checks)."""

    def url(self, path: str, host: str = "images.example.com") -> str:
        return f"http://{host}:{self.port}{path}"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """Quiet when the fetcher hung up (it cuts slow and oversized answers off on purpose); loud otherwise."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def local_internet(monkeypatch) -> Iterator[Internet]:
    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    seen: list[str] = []
    monkeypatch.setattr(fetch, "RESOLVE", resolve)
    monkeypatch.setattr(fetch, "TRANSPORT", lambda: LoopbackTransport(port, seen))
    try:
        yield Internet(port, seen)
    finally:
        server.shutdown()
        server.server_close()


def url_settings(settings: Settings, **overrides) -> Settings:
    """URL fetching on, test hosts allowed, small limits (a slow or silent server is cut off after 5 s:
    a busy CI machine needs that slack)."""
    values = {"url_fetch": True, "url_allowed_hosts": ALLOWED, "url_timeout_s": 5.0, "url_max_bytes": 300_000}
    return dataclasses.replace(settings, **{**values, **overrides})
