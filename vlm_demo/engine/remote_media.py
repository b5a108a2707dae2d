"""Pictures and clips a remote engine has sent to a server with their bytes, so that later requests send them by
reference (their ``uuid`` and a null URL: ``openai_request.by_reference``), and the one way such a request is
sent: lean first, the whole body again when the server answers that it no longer holds an item (400)."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from ..errors import RemoteError
from ..settings import REMOTE_MEDIA_REMEMBERED
from .openai_request import by_reference, media_uuids

T = TypeVar("T")


class ServerRefusal(RemoteError):
    """The server answered a request with an error status (its text in the message)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class SentMedia:
    """What was sent with its bytes, by endpoint path (vLLM 0.32's render endpoint and its chat completions keep
    separate processor caches), processing options (part of vLLM's cache key) and uuid; at most
    ``REMOTE_MEDIA_REMEMBERED`` items per path, the oldest forgotten first."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._sent: dict[str, OrderedDict[tuple[str, str], None]] = {}

    @staticmethod
    def _options(body: Mapping[str, Any]) -> str:
        return json.dumps([body.get("mm_processor_kwargs"), body.get("media_io_kwargs")], sort_keys=True)

    def lean(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """``body`` with the items already sent to ``path`` by reference (``body`` itself when none is)."""
        known = self._sent.get(path)
        if not self.enabled or not known:
            return body
        options = self._options(body)
        return by_reference(body, lambda uuid: (options, uuid) in known)

    def remember(self, path: str, body: Mapping[str, Any]) -> None:
        """The server processed ``body`` at ``path``: it holds each of its items now."""
        if not self.enabled:
            return
        known = self._sent.setdefault(path, OrderedDict())
        options = self._options(body)
        for uuid in media_uuids(body):
            known[(options, uuid)] = None
            known.move_to_end((options, uuid))
        while len(known) > REMOTE_MEDIA_REMEMBERED:
            known.popitem(last=False)

    def forget(self, path: str) -> None:
        """The server lacks an item sent to ``path`` by reference (its cache evicted it, or another of its API
        servers took the request): each goes with its bytes again."""
        self._sent.pop(path, None)

    async def send(self, path: str, body: Mapping[str, Any],
                   post: Callable[[Mapping[str, Any]], Awaitable[T]]) -> T:
        """``post(body)`` with the known items by reference; on a 400 (``ServerRefusal``) to that, ``post`` of the
        whole body. What ``post`` answers other than None is the server having processed every item."""
        lean = self.lean(path, body)
        if lean is not body:
            try:
                out = await post(lean)
            except ServerRefusal as exc:
                if exc.status != 400:
                    raise
                self.forget(path)
            else:
                if out is not None:
                    self.remember(path, body)
                return out
        out = await post(body)
        if out is not None:
            self.remember(path, body)
        return out
