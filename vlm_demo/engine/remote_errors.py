"""A remote vLLM server's failures as the app's errors: a transport error (timeout, refused, unreachable) or a
status with the server's own message (OpenAI's ``error.message``, FastAPI's ``detail``) as one line."""

from __future__ import annotations

import errno
import json
from typing import Any

import httpx

from ..errors import RemoteError
from ..settings import Settings
from .remote_media import ServerRefusal

NOT_OFFERED = frozenset({403, 405, 501})
"""Answers of a server that does not offer an endpoint (vLLM without ``--enable-scale-out``: 403)."""


def transport_error(exc: httpx.HTTPError, url: str, path: str, settings: Settings) -> RemoteError:
    """What a request to ``url`` + ``path`` that got no answer failed on, in words."""
    if isinstance(exc, httpx.ConnectTimeout):
        return RemoteError(f"cannot reach {url}: connecting timed out after {settings.remote_connect_timeout_s:g} s")
    if isinstance(exc, httpx.TimeoutException):
        return RemoteError(f"{url}{path} timed out after {settings.remote_timeout_s:g} s")
    if isinstance(exc, httpx.ConnectError):
        cause: BaseException | None = exc
        refused = False
        while cause is not None and not refused:  # httpx -> httpcore -> OSError -> ConnectionRefusedError
            refused = isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED
            cause = cause.__cause__ or cause.__context__
        return RemoteError(f"cannot reach {url}: {'connection refused' if refused else exc or 'no route'}")
    return RemoteError(f"{url}{path}: {type(exc).__name__}: {exc}")


def status_error(url: str, path: str, status: int, text: str) -> ServerRefusal:
    """A server's refusal (a status other than 200), with its own message."""
    return ServerRefusal(f"{url}{path}: the server answered {status}: {error_text(text)}", status)


def is_missing_route(text: str) -> bool:
    """FastAPI's answer for a path it does not serve (not vLLM's 404 for an unknown model)."""
    try:
        return json.loads(text) == {"detail": "Not Found"}
    except ValueError:
        return False


def error_text(text: str, limit: int = 500) -> str:
    """The server's error message: OpenAI's ``error.message``, FastAPI's ``detail``, or the raw text."""
    message: Any = text
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        message = (error.get("message") if isinstance(error, dict) else error) or data.get("detail") or data
        if not isinstance(message, str):
            message = json.dumps(message)
    message = " ".join(str(message).split()) or "(no error text)"
    return message if len(message) <= limit else message[: limit - 1] + "…"
