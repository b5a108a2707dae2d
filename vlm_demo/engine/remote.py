"""A remote engine: an OpenAI-compatible vLLM server (``vllm serve``, Ray Serve LLM) in front of which
the app runs, with the same interface as the in-process ``Engine``.

Everything the panels show is the server's own answer: the expanded ids and image ranges from its
``/v1/chat/completions/render`` (or ``/tokenize`` where render is off), text from its ``/detokenize``,
special tokens from ``/tokenizer_info``, ``max_model_len`` from ``/v1/models``. Answers stream from
``/v1/chat/completions``; closing the stream (Stop) closes the connection and vLLM aborts the request.
Images go out only as PNG ``data:`` URLs of the app's own decoded, checked images: the server is never
handed a URL or a path. Only the content-format rule comes from vLLM itself, run on the server's
chat template. This module is the HTTP client; the request body is ``openai_request.py``'s, and what is
rebuilt from the server's ids (ranges, the prompt before expansion, geometry) is ``remote_prompt.py``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from ..errors import RemoteError
from ..profile import resolve
from ..registry import AUTO, ModelSpec, Sampling, base_url
from ..settings import Settings
from .media_parts import AUDIO_RATE, _sent_clips
from .openai_request import USAGE, prompt_body, request_body
from .remote_errors import NOT_OFFERED, error_text, is_missing_route, status_error, transport_error
from .remote_media import SentMedia
from .remote_prompt import (PART_MODALITY, added_tokens, content_format, geometry, info_specials, most_common, pieces,
                            prompt_text, ranges_from_ids, rendered_ids, served_chat_template, template_conversation)
from .runs import kept_tags, text_segments, token_runs, without_other_specials
from .types import ItemRange, RenderedPrompt, TokenDelta

log = logging.getLogger(__name__)

DECODE_CACHE = 4096
"""Decoded id stretches kept per engine (the chat template's text repeats from request to request)."""


class RemoteEngine:
    """One model on a remote vLLM server; cheap to create (no process), shared by every request."""

    def __init__(self, spec: ModelSpec, settings: Settings):
        if spec.endpoint is None or spec.served_model_name is None:
            raise ValueError(f"{spec.name} is not an endpoint entry")
        self.spec = spec
        self.adapter = resolve(spec).adapter
        """The family adapter: the entry's profile's (for ``family: auto`` the generic one unless the checkpoint
        is here; a server does not say its model_type), which needs the server's render endpoint for the ranges."""
        self.url = base_url(spec.endpoint)
        self.served_model_name = spec.served_model_name
        self.settings = settings
        self.child_pids: frozenset[int] = frozenset()
        self.max_model_len = 0
        """The server's context window (from ``/v1/models``), known after ``connect``."""
        self.root: str | None = None
        """The checkpoint the server says it serves (``/v1/models`` ``root``: a directory or a Hub id), after
        ``connect``."""
        self.special_tokens: tuple[str, ...] = ()
        """Strings the server's tokenizer turns into special tokens (from ``/tokenizer_info``)."""
        self.content_format = "unknown"
        """Content format of the server's chat template ("string" / "openai"; "unknown" without
        ``/tokenizer_info``)."""
        self.image_token_id = -1
        self.offers_render: bool | None = None
        """Whether the server answers ``/v1/chat/completions/render`` (None until first asked)."""
        self.offers_tokenizer_info = False
        self._special_names: dict[int, str] = {}
        self._decoded: OrderedDict[tuple[int, ...], str] = OrderedDict()
        self._media = SentMedia(settings.remote_media_by_reference)
        """Pictures and clips the server has processed: sent by reference now."""
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self.connected = False

    # --- what EngineManager and the service ask of any engine ---------------------------------

    @property
    def dead(self) -> bool:
        """A remote engine never dies here; an unreachable server fails each request with a message."""
        return False

    def running_requests(self) -> int:
        """Requests of this app in flight on the server are the server's business (no switch cost)."""
        return 0

    def shutdown(self) -> None:
        """Forget the HTTP clients (there is no process to stop)."""
        self._clients.clear()

    async def aclose(self) -> None:
        """Close the current event loop's HTTP client."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def token_runs(self, ids: Sequence[int]) -> tuple[tuple[str, int], ...]:
        """The ids as runs; the text between special tokens was decoded by the server during ``render``."""
        return token_runs(ids, self._special_names, lambda seg: self._decoded.get(tuple(seg), ""))

    def token_texts(self, ids: Sequence[int]) -> dict[int, str]:
        """Each id's own text: not known here (the server decodes whole stretches), so none."""
        return {}

    def joined_texts(self, ids: Sequence[int], texts: Mapping[int, str]) -> dict[int, tuple[int, str]]:
        """Characters spanning several tokens: none known (no id's own text is)."""
        return {}

    # --- HTTP ----------------------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            headers = {}
            if self.spec.api_key_env:
                key = os.environ.get(self.spec.api_key_env)
                if not key:
                    raise RemoteError(f"{self.spec.name}: the environment variable {self.spec.api_key_env} "
                                      "(api_key_env) holding the server's API key is not set")
                headers["Authorization"] = f"Bearer {key}"
            timeout = httpx.Timeout(self.settings.remote_timeout_s, connect=self.settings.remote_connect_timeout_s)
            # trust_env=False: no proxy or netrc from the environment; only the configured URL is contacted.
            client = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout, trust_env=False,
                                       follow_redirects=False)
            self._clients[loop] = client
        return client

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None,
                    not_offered: frozenset[int] = frozenset()) -> Any:
        """The JSON answer of one request; None when the status is in ``not_offered``."""
        try:
            response = await self._client().request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.url, path, self.settings) from None
        if response.status_code in not_offered or (response.status_code == 404 and not_offered
                                                   and is_missing_route(response.text)):
            return None
        if response.status_code >= 400:
            raise status_error(self.url, path, response.status_code, response.text)
        try:
            return response.json()
        except ValueError:
            raise RemoteError(f"{self.url}{path}: the answer is not JSON: {response.text[:200]!r}") from None

    async def media_call(self, path: str, body: Mapping[str, Any],
                         not_offered: frozenset[int] = frozenset()) -> Any:
        """``call`` (POST) of a body with pictures or clips, those the server holds by reference
        (``SentMedia.send``)."""
        return await self._media.send(path, body, lambda sent: self.call("POST", path, dict(sent), not_offered))

    async def _open_stream(self, path: str, body: Mapping[str, Any]) -> httpx.Response:
        """The open streamed response to ``body``, its pictures and clips as ``media_call`` sends them."""
        async def open_one(sent: Mapping[str, Any]) -> httpx.Response:
            client = self._client()
            response = await client.send(client.build_request("POST", path, json=sent), stream=True)
            if response.status_code >= 400:
                text = (await response.aread()).decode(errors="replace")
                await response.aclose()
                raise status_error(self.url, path, response.status_code, text)
            return response
        return await self._media.send(path, body, open_one)

    # --- connecting ----------------------------------------------------------------------------

    async def models(self) -> list[dict[str, Any]]:
        """The server's model list (``/v1/models``): its health check too."""
        listing = await self.call("GET", "/v1/models")
        if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
            raise RemoteError(f"{self.url}/v1/models: not an OpenAI model list (is this a vLLM server?)")
        return listing["data"]

    async def model_entry(self) -> dict[str, Any]:
        """The served model's entry in ``/v1/models``; ``RemoteError`` when the server does not serve it."""
        models = await self.models()
        entry = next((m for m in models if m.get("id") == self.served_model_name), None)
        if entry is None:
            names = ", ".join(str(m.get("id")) for m in models) or "nothing"
            raise RemoteError(f"{self.url} does not serve {self.served_model_name!r} (it serves {names})")
        return entry

    async def connect(self) -> RemoteEngine:
        """Check the server serves the model and learn its context window, tokenizer and image token."""
        if self.connected:
            return self
        entry = await self.model_entry()
        self.max_model_len = int(entry.get("max_model_len") or 0)
        if self.max_model_len <= 0:
            raise RemoteError(f"{self.url}/v1/models gives no max_model_len for {self.served_model_name!r} "
                              "(the app needs a vLLM server)")
        self.root = entry.get("root") if isinstance(entry.get("root"), str) else None
        if self.spec.family == AUTO and self.root:  # the checkpoint it serves, if here
            self.adapter = resolve(self.spec, self.root).adapter
        family = self.adapter
        info = await self.call("GET", "/tokenizer_info", not_offered=NOT_OFFERED)
        if info is not None:
            self.offers_tokenizer_info = True
            self._special_names = added_tokens(info)
            # (vLLM's rule: its first use imports vLLM's renderer, seconds: not in the page's event loop)
            template = await asyncio.to_thread(served_chat_template, info, self.root)
            self.content_format = (await asyncio.to_thread(content_format, template)
                                   if self.spec.chat_template_content_format == "auto"
                                   else self.spec.chat_template_content_format)
        image_token = family.feature_tokens.get("image")
        markers = [t for t in (image_token, *family.markers.get("image", ("", ""))) if t]
        for token in markers:  # the family's own tokens, from the server's tokenizer in any case
            ids = await self._tokenize({"model": self.served_model_name, "prompt": token, "add_special_tokens": False})
            if len(ids) != 1:
                raise RemoteError(f"{self.served_model_name} at {self.url} does not have {token!r} as one token: "
                                  f"is its family {family.name}?")
            self._special_names.setdefault(ids[0], token)
            if token == image_token:
                self.image_token_id = ids[0]
        self.special_tokens = tuple(sorted(set(self._special_names.values()) | set(info_specials(info))))
        self.connected = True
        return self

    async def _tokenize(self, body: dict[str, Any]) -> list[int]:
        out = await self.call("POST", "/tokenize", body, not_offered=NOT_OFFERED)
        if out is None:
            raise RemoteError(f"{self.url} does not offer /tokenize (nor /v1/chat/completions/render): the panels "
                              "need a vLLM OpenAI server's own endpoints (vllm serve; see README 'Scaling out')")
        return list(out["tokens"])

    # --- rendering -----------------------------------------------------------------------------

    async def render(self, messages: Sequence[dict[str, Any]], mm_kwargs: dict[str, Any],
                     media_io: Mapping[str, Mapping[str, Any]] | None = None) -> RenderedPrompt:
        """The server renders the request: its expanded ids and media ranges, as it will generate from."""
        family = self.adapter
        kwargs = dict(mm_kwargs)
        body = prompt_body(self.served_model_name, messages, kwargs, media_io)
        parts = [part for m in messages if isinstance(m.get("content"), list) for part in m["content"]]
        sent = {modality: sum(1 for p in parts if PART_MODALITY.get(p.get("type", "")) == modality)
                for modality in ("image", "video", "audio")}
        ids, found = await self._expanded(body, sent)
        for modality, n in sent.items():
            if len(found.get(modality, [])) != n:
                raise RemoteError(f"{self.url}: {n} {modality}(s) sent, but the server's ids hold "
                                  f"{len(found.get(modality, []))} {modality} range(s)")
        media = {m: tuple(r) for m, r in found.items() if r and m in sent}
        token_ids = {m: self.image_token_id if m == "image" and self.image_token_id >= 0 else most_common(ids, r)
                     for m, r in media.items()}
        await self._decode_segments(ids, media)
        names = {m: self._special_names.get(t, "") for m, t in token_ids.items()}
        placeholders = {m: family.placeholders.get(m) or names[m] if m != "video" else names[m] for m in media}
        clips = _sent_clips(messages, AUDIO_RATE)
        inputs = {"image": [p.get("image_pil") for p in parts if p.get("type") == "image_pil"], "audio": list(clips)}
        return RenderedPrompt(
            model=self.spec.name,
            family=family.name,
            content_format=self.content_format,
            conversation=tuple(template_conversation(
                messages, self.content_format,
                {"image": placeholders.get("image") or family.placeholders.get("image", ""),
                 "audio": placeholders.get("audio") or family.placeholders.get("audio", "")})),
            prompt=prompt_text(family, ids, self._special_names, self._decoded, media, token_ids),
            prompt_token_ids=tuple(ids),
            ranges=media,
            geometry=geometry(family, ids, media, token_ids, inputs, kwargs),
            token_ids=token_ids,
            placeholders=placeholders,
            geometry_note=(None if family.geometry_from_count.get("image") or not sent["image"]
                           else f"no geometry adapter for {self.served_model_name}"),
            mm_kwargs=kwargs,
            max_model_len=self.max_model_len,
            engine_input=body,
            media_io_kwargs=body.get("media_io_kwargs", {}),
            frames={**({"video": tuple(None for _ in media["video"])} if "video" in media else {}),
                    **({"audio": clips} if clips else {})},
        )

    async def _expanded(self, body: dict[str, Any], sent: Mapping[str, int]) -> tuple[list[int], dict[str, list[ItemRange]]]:
        """The server's expanded ids and media ranges for ``body``: from its render endpoint, else (not
        offered) the ids from ``/tokenize`` and the image ranges read from them (families whose ranges can
        be; a video's cannot)."""
        family = self.adapter
        if self.offers_render is not False:
            out = await self.media_call("/v1/chat/completions/render", body, not_offered=NOT_OFFERED)
            self.offers_render = out is not None
            if out is not None:
                ids, ranges = rendered_ids(out)
                return list(ids), {modality: list(found) for modality, found in ranges.items()}
        for modality in ("video", "audio"):
            if sent.get(modality):
                raise RemoteError(f"{self.url} does not offer /v1/chat/completions/render, and a {modality}'s ranges "
                                  "cannot be read from /tokenize: start the server with --enable-scale-out")
        if not family.ranges_from_ids or "image" not in family.feature_tokens:
            raise RemoteError(f"{self.url} does not offer /v1/chat/completions/render, and {family.title}'s "
                              "image ranges cannot be read from /tokenize: start the server with "
                              "--enable-scale-out")
        ids = await self._tokenize({**body, "add_generation_prompt": True})
        return ids, {"image": self._ranges_from_ids(ids)}

    @property
    def placeholders(self) -> dict[str, str]:
        """The placeholder texts the family adapter knows, per modality."""
        return {m: text for m, text in self.adapter.placeholders.items() if text}

    def _ranges_from_ids(self, ids: Sequence[int]) -> list[ItemRange]:
        by_text = {text: i for i, text in self._special_names.items()}
        start, end = (by_text.get(m) if m else None for m in self.adapter.markers.get("image", ("", "")))
        return ranges_from_ids(ids, self.image_token_id, start, end)

    async def _decode_segments(self, ids: Sequence[int], media: Mapping[str, Sequence[ItemRange]]) -> None:
        """Have the server decode every id stretch the runs and the prompt text need (cached)."""
        wanted = {seg for seg in text_segments(ids, self._special_names)}
        wanted |= {seg for kind, seg in pieces(ids, self._special_names, media) if kind == "text"}
        missing = [seg for seg in wanted if seg not in self._decoded]

        async def decode(seg: tuple[int, ...]) -> None:
            out = await self.call("POST", "/detokenize", {"model": self.served_model_name, "tokens": list(seg)})
            self._decoded[seg] = out["prompt"]

        for start in range(0, len(missing), 16):  # a few at a time
            await asyncio.gather(*(decode(seg) for seg in missing[start:start + 16]))
        while len(self._decoded) > DECODE_CACHE:
            self._decoded.popitem(last=False)

    # --- generation ----------------------------------------------------------------------------

    async def stream(self, rendered: RenderedPrompt, sampling: Sampling) -> AsyncIterator[TokenDelta]:
        """Stream the answer to ``rendered``; closing the iterator closes the HTTP stream (vLLM aborts)."""
        kept = kept_tags(self.adapter)
        body = request_body(rendered.engine_input, sampling, keep_special_tokens=bool(kept), stream=True)
        body |= USAGE | {"return_token_ids": True}  # how the answer is read: token counts, the cached tokens
        path = "/v1/chat/completions"
        try:
            async with contextlib.aclosing(await self._open_stream(path, body)) as response:
                first, finish = True, None
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:
                        raise RemoteError(f"{self.url}{path}: the server stopped the answer: "
                                          f"{error_text(json.dumps(chunk))}")
                    prompt_ids = tuple(chunk["prompt_token_ids"]) if first and chunk.get("prompt_token_ids") else None
                    first = False
                    for choice in chunk.get("choices") or ():
                        token_ids = choice.get("token_ids")
                        text = without_other_specials((choice.get("delta") or {}).get("content") or "",
                                                      self.special_tokens, kept)
                        finish = choice.get("finish_reason") or finish
                        yield TokenDelta(text, len(token_ids) if token_ids is not None else int(bool(text)),
                                         choice.get("finish_reason"), prompt_ids)
                        prompt_ids = None
                    # The last chunk's usage (stream_options.include_usage); cached_tokens only from a server
                    # started with --enable-prompt-tokens-details. It comes after the finish reason, which the
                    # stream's last delta repeats.
                    details = (chunk.get("usage") or {}).get("prompt_tokens_details") or {}
                    if details.get("cached_tokens") is not None:
                        yield TokenDelta("", 0, finish, num_cached_tokens=int(details["cached_tokens"]))
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.url, path, self.settings) from None
        except ValueError as exc:
            raise RemoteError(f"{self.url}{path}: unreadable stream chunk ({exc})") from None
