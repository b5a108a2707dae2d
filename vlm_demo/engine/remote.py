"""A remote engine: an OpenAI-compatible vLLM server (``vllm serve``, Ray Serve LLM) in front of which
the app runs, with the same interface as the in-process ``Engine``.

Everything the panels show is the server's own answer: the expanded ids and image ranges from its
``/v1/chat/completions/render`` (or ``/tokenize`` where render is off), text from its ``/detokenize``,
special tokens from ``/tokenizer_info``, ``max_model_len`` from ``/v1/models``. Answers stream from
``/v1/chat/completions``; closing the stream (Stop) closes the connection and vLLM aborts the request.
Images go out only as PNG ``data:`` URLs of the app's own decoded, checked images: the server is never
handed a URL or a path. Only the content-format rule comes from vLLM itself, run on the server's
chat template.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from ..errors import InputError, RemoteError
from ..families import ItemGeometry, no_geometry
from ..profile import profile
from ..intake import png_data_url
from ..registry import AUTO, ModelSpec, Sampling, base_url
from ..settings import Settings
from .runs import text_segments, token_runs, without_other_specials
from .types import ItemRange, RenderedPrompt, TokenDelta

log = logging.getLogger(__name__)

NOT_OFFERED = frozenset({403, 405, 501})
"""Answers of a server that does not offer an endpoint (vLLM without ``--enable-scale-out``: 403)."""
DECODE_CACHE = 4096
"""Decoded id stretches kept per engine (the chat template's text repeats from request to request)."""


class RemoteEngine:
    """One model on a remote vLLM server; cheap to create (no process), shared by every request."""

    def __init__(self, spec: ModelSpec, settings: Settings):
        if spec.endpoint is None or spec.served_model_name is None:
            raise ValueError(f"{spec.name} is not an endpoint entry")
        self.spec = spec
        self.adapter = profile(spec).adapter
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

    def _transport_error(self, exc: httpx.HTTPError, path: str) -> RemoteError:
        if isinstance(exc, httpx.ConnectTimeout):
            return RemoteError(f"cannot reach {self.url}: connecting timed out after "
                               f"{self.settings.remote_connect_timeout_s:g} s")
        if isinstance(exc, httpx.TimeoutException):
            return RemoteError(f"{self.url}{path} timed out after {self.settings.remote_timeout_s:g} s")
        if isinstance(exc, httpx.ConnectError):
            cause: BaseException | None = exc
            refused = False
            while cause is not None and not refused:  # httpx -> httpcore -> OSError -> ConnectionRefusedError
                refused = isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED
                cause = cause.__cause__ or cause.__context__
            return RemoteError(f"cannot reach {self.url}: {'connection refused' if refused else exc or 'no route'}")
        return RemoteError(f"{self.url}{path}: {type(exc).__name__}: {exc}")

    def _status_error(self, status: int, text: str, path: str) -> RemoteError:
        return RemoteError(f"{self.url}{path}: the server answered {status}: {_error_text(text)}")

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
                    not_offered: frozenset[int] = frozenset()) -> Any:
        """The JSON answer of one request; None when the status is in ``not_offered``."""
        try:
            response = await self._client().request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, path) from None
        if response.status_code in not_offered or (response.status_code == 404 and not_offered
                                                   and _is_missing_route(response.text)):
            return None
        if response.status_code >= 400:
            raise self._status_error(response.status_code, response.text, path)
        try:
            return response.json()
        except ValueError:
            raise RemoteError(f"{self.url}{path}: the answer is not JSON: {response.text[:200]!r}") from None

    # --- connecting ----------------------------------------------------------------------------

    async def models(self) -> list[dict[str, Any]]:
        """The server's model list (``/v1/models``): its health check too."""
        listing = await self._call("GET", "/v1/models")
        if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
            raise RemoteError(f"{self.url}/v1/models: not an OpenAI model list (is this a vLLM server?)")
        return listing["data"]

    async def connect(self) -> RemoteEngine:
        """Check the server serves the model and learn its context window, tokenizer and image token."""
        if self.connected:
            return self
        models = await self.models()
        entry = next((m for m in models if m.get("id") == self.served_model_name), None)
        if entry is None:
            names = ", ".join(str(m.get("id")) for m in models) or "nothing"
            raise RemoteError(f"{self.url} does not serve {self.served_model_name!r} (it serves {names})")
        self.max_model_len = int(entry.get("max_model_len") or 0)
        if self.max_model_len <= 0:
            raise RemoteError(f"{self.url}/v1/models gives no max_model_len for {self.served_model_name!r} "
                              "(the app needs a vLLM server)")
        self.root = entry.get("root") if isinstance(entry.get("root"), str) else None
        if self.spec.family == AUTO and self.root:  # the checkpoint it serves, if here
            self.adapter = profile(self.spec, self.root).adapter
        family = self.adapter
        info = await self._call("GET", "/tokenizer_info", not_offered=NOT_OFFERED)
        if info is not None:
            self.offers_tokenizer_info = True
            self._special_names = _added_tokens(info)
            self.content_format = _content_format(info.get("chat_template"))
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
        out = await self._call("POST", "/tokenize", body, not_offered=NOT_OFFERED)
        if out is None:
            raise RemoteError(f"{self.url} does not offer /tokenize (nor /v1/chat/completions/render): the panels "
                              "need a vLLM OpenAI server's own endpoints (vllm serve; see README 'Scale out')")
        return list(out["tokens"])

    # --- rendering -----------------------------------------------------------------------------

    async def render(self, messages: Sequence[dict[str, Any]], mm_kwargs: dict[str, Any],
                     media_io: Mapping[str, Mapping[str, Any]] | None = None) -> RenderedPrompt:
        """The server renders the request: its expanded ids and media ranges, as it will generate from."""
        family = self.adapter
        kwargs = dict(mm_kwargs)
        body: dict[str, Any] = {"model": self.served_model_name, "messages": [wire_message(m) for m in messages]}
        if kwargs:
            body["mm_processor_kwargs"] = kwargs
        if media_io:
            body["media_io_kwargs"] = {m: dict(v) for m, v in media_io.items()}
        videos = sum(1 for m in messages if isinstance(m.get("content"), list)
                     for part in m["content"] if part.get("type") == "video_url")
        ids: list[int] | None = None
        found: dict[str, list[ItemRange]] = {}
        if self.offers_render is not False:
            out = await self._call("POST", "/v1/chat/completions/render", body, not_offered=NOT_OFFERED)
            self.offers_render = out is not None
            if out is not None:
                ids = list(out["token_ids"])
                features = out.get("features") or {}
                found = {modality: [ItemRange(int(p["offset"]), int(p["length"])) for p in placed]
                         for modality, placed in (features.get("mm_placeholders") or {}).items() if placed}
        if ids is None:
            if videos:
                raise RemoteError(f"{self.url} does not offer /v1/chat/completions/render, and a video's ranges "
                                  "cannot be read from /tokenize: start the server with --enable-scale-out")
            if not family.ranges_from_ids or "image" not in family.feature_tokens:
                raise RemoteError(f"{self.url} does not offer /v1/chat/completions/render, and {family.title}'s "
                                  "image ranges cannot be read from /tokenize: start the server with "
                                  "--enable-scale-out")
            ids = await self._tokenize({**body, "add_generation_prompt": True})
            found = {"image": self._ranges_from_ids(ids)}
        images = [part.get("image_pil") for m in messages if isinstance(m.get("content"), list)
                  for part in m["content"] if part.get("type") == "image_pil"]
        ranges = found.get("image", [])
        for modality, sent in (("image", len(images)), ("video", videos)):
            if len(found.get(modality, [])) != sent:
                raise RemoteError(f"{self.url}: {sent} {modality}(s) sent, but the server's ids hold "
                                  f"{len(found.get(modality, []))} {modality} range(s)")
        token_id = self.image_token_id if self.image_token_id >= 0 else _most_common(ids, ranges)
        video_ranges = found.get("video", [])
        video_token = _most_common(ids, video_ranges)
        await self._decode_segments(ids, [*ranges, *video_ranges])
        counts = [sum(1 for t in ids[r.offset:r.offset + r.length] if t == token_id) for r in ranges]
        from_count = family.geometry_from_count.get("image")
        placeholder = family.placeholders.get("image") or self._special_names.get(token_id, "")
        out_ranges = {m: tuple(r) for m, r in (("image", ranges), ("video", video_ranges)) if r}
        geometry: dict[str, tuple[ItemGeometry, ...]] = {}
        if ranges:
            geometry["image"] = tuple((from_count(n, image, kwargs) if from_count and n else None) or no_geometry(image)
                                      for n, image in zip(counts, images, strict=True))
        if video_ranges:
            geometry["video"] = tuple(no_geometry(None) for _ in video_ranges)
        return RenderedPrompt(
            model=self.spec.name,
            family=family.name,
            content_format=self.content_format,
            conversation=tuple(_conversation(messages, self.content_format, placeholder)),
            prompt=self._prompt_text(ids, ranges, token_id, video_ranges, video_token),
            prompt_token_ids=tuple(ids),
            ranges=out_ranges,
            geometry=geometry,
            token_ids={m: token_id if m == "image" else video_token for m in out_ranges},
            placeholders={m: placeholder if m == "image" else self._special_names.get(video_token, "")
                          for m in out_ranges},
            geometry_note=None if from_count else f"no geometry adapter for {self.served_model_name}",
            mm_kwargs=kwargs,
            max_model_len=self.max_model_len,
            engine_input=body,
            media_io_kwargs=body.get("media_io_kwargs", {}),
            frames={"video": tuple(None for _ in video_ranges)} if video_ranges else {},
        )

    @property
    def placeholders(self) -> dict[str, str]:
        """The placeholder texts the family adapter knows, per modality."""
        return {m: text for m, text in self.adapter.placeholders.items() if text}

    def _ranges_from_ids(self, ids: Sequence[int]) -> list[ItemRange]:
        by_text = {text: i for i, text in self._special_names.items()}
        start, end = (by_text.get(m) if m else None for m in self.adapter.markers.get("image", ("", "")))
        return ranges_from_ids(ids, self.image_token_id, start, end)

    def _pieces(self, ids: Sequence[int], ranges: Sequence[ItemRange],
                video_ranges: Sequence[ItemRange] = ()) -> list[tuple[str, Any]]:
        """The ids as ("image", None) for each range (("video", None) for each video range), ("special",
        text) and ("text", id stretch)."""
        starts = {r.offset: ("image", r) for r in ranges} | {r.offset: ("video", r) for r in video_ranges}
        pieces: list[tuple[str, Any]] = []
        i = 0
        while i < len(ids):
            if i in starts:
                kind, found = starts[i]
                pieces.append((kind, None))
                i += found.length
                continue
            j = i
            while j < len(ids) and j not in starts and ids[j] not in self._special_names:
                j += 1
            if j > i:
                pieces.append(("text", tuple(ids[i:j])))
                i = j
            elif ids[i] in self._special_names:
                pieces.append(("special", self._special_names[ids[i]]))
                i += 1
        return pieces

    async def _decode_segments(self, ids: Sequence[int], ranges: Sequence[ItemRange]) -> None:
        """Have the server decode every id stretch the runs and the prompt text need (cached)."""
        wanted = {seg for seg in text_segments(ids, self._special_names)}
        wanted |= {seg for kind, seg in self._pieces(ids, ranges) if kind == "text"}
        missing = [seg for seg in wanted if seg not in self._decoded]

        async def decode(seg: tuple[int, ...]) -> None:
            out = await self._call("POST", "/detokenize", {"model": self.served_model_name, "tokens": list(seg)})
            self._decoded[seg] = out["prompt"]

        for start in range(0, len(missing), 16):  # a few at a time
            await asyncio.gather(*(decode(seg) for seg in missing[start:start + 16]))
        while len(self._decoded) > DECODE_CACHE:
            self._decoded.popitem(last=False)

    def _prompt_text(self, ids: Sequence[int], ranges: Sequence[ItemRange], token_id: int,
                     video_ranges: Sequence[ItemRange] = (), video_token: int = -1) -> str:
        """The chat template's output before expansion: each image range back to what it expanded from (a
        video range back to its feature token)."""
        family = self.adapter
        if family.unexpand is not None:  # the expansion merged into the text around it: undo it on the text
            return family.unexpand("".join(value if kind == "special" else self._decoded.get(value, "")
                                           for kind, value in self._pieces(ids, ())))
        # A range inside the placeholder text (Qwen: the pads between vision start/end) came from the
        # image token; a range that is the whole expansion came from the placeholder itself. Without
        # an adapter, the feature token stands in.
        token = family.feature_tokens.get("image") or self._special_names.get(token_id, "")
        placeholder = family.placeholders.get("image") or token
        stand_in = token if token and token in placeholder else placeholder
        video = self._special_names.get(video_token, "")
        return "".join(stand_in if kind == "image" else video if kind == "video" else value if kind == "special"
                       else self._decoded.get(value, "") for kind, value in self._pieces(ids, ranges, video_ranges))

    # --- generation ----------------------------------------------------------------------------

    async def stream(self, rendered: RenderedPrompt, sampling: Sampling) -> AsyncIterator[TokenDelta]:
        """Stream the answer to ``rendered``; closing the iterator closes the HTTP stream (vLLM aborts)."""
        body = {**rendered.engine_input, "stream": True, "stream_options": {"include_usage": True},
                "return_token_ids": True, "max_tokens": sampling.max_tokens, "temperature": sampling.temperature,
                "top_p": sampling.top_p}
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.ignore_eos:
            body["ignore_eos"] = True
        if sampling.regex is not None:  # vLLM's structured outputs, as Export writes it
            body["structured_outputs"] = {"regex": sampling.regex}
        kept = frozenset(self.adapter.grounding.tags) if self.adapter.grounding else frozenset()
        if kept:
            body["skip_special_tokens"] = False
        path = "/v1/chat/completions"
        try:
            async with self._client().stream("POST", path, json=body) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode(errors="replace")
                    raise self._status_error(response.status_code, text, path)
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
                                          f"{_error_text(json.dumps(chunk))}")
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
            raise self._transport_error(exc, path) from None
        except ValueError as exc:
            raise RemoteError(f"{self.url}{path}: unreadable stream chunk ({exc})") from None


def ranges_from_ids(ids: Sequence[int], image_token_id: int, start_id: int | None = None,
                    end_id: int | None = None) -> list[ItemRange]:
    """Image ranges as vLLM places them, from the expanded ids alone: each run of the image token,
    widened by the family's start / end marker where one sits right beside it (InternVL's ``<img>``)."""
    ranges: list[ItemRange] = []
    i = 0
    while i < len(ids):
        if ids[i] != image_token_id:
            i += 1
            continue
        j = i
        while j < len(ids) and ids[j] == image_token_id:
            j += 1
        lo = i - 1 if start_id is not None and i > 0 and ids[i - 1] == start_id else i
        hi = j + 1 if end_id is not None and j < len(ids) and ids[j] == end_id else j
        ranges.append(ItemRange(lo, hi - lo))
        i = j
    return ranges


def _most_common(ids: Sequence[int], ranges: Sequence[ItemRange]) -> int:
    """The id that fills the ranges (the feature token, for a model with no adapter)."""
    counts = Counter(t for r in ranges for t in ids[r.offset:r.offset + r.length])
    return counts.most_common(1)[0][0] if counts else -1


def wire_message(message: dict[str, Any]) -> dict[str, Any]:
    """One message (``service.to_openai_messages``) as the OpenAI API carries it: decoded images as PNG data
    URLs, videos as the ``video_url`` data URLs they already are (the one such conversion: the remote
    engine, Export and the tests' servers use it)."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    parts = []
    for part in content:
        if part.get("type") == "image_pil":
            parts.append({"type": "image_url", "image_url": {"url": png_data_url(part["image_pil"])}})
        elif part.get("type") == "image_embeds":
            raise InputError("precomputed image embeddings go to an in-process engine only, not to a remote server")
        else:
            parts.append(part)
    return {**message, "content": parts}


def _conversation(messages: Sequence[dict[str, Any]], content_format: str, placeholder: str) -> list[dict[str, Any]]:
    """The messages as vLLM hands them to the chat template: image parts as ``{"type": "image"}``
    ("openai" format), or placeholders before the text ("string" format)."""
    out = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            out.append(dict(m))
            continue
        if content_format == "openai":
            out.append({"role": m["role"], "content": [
                {"type": "image"} if p.get("type") in ("image_pil", "image_embeds")
                else {"type": "video"} if p.get("type") == "video_url" else p for p in content]})
        else:
            images = [placeholder for p in content if p.get("type") in ("image_pil", "image_embeds")]
            texts = ["\n".join(p["text"] for p in content if p.get("type") == "text")]
            out.append({"role": m["role"], "content": "\n".join(images + texts)})
    return out


def _added_tokens(info: dict[str, Any]) -> dict[int, str]:
    """Id -> text of the tokenizer's added tokens, from ``/tokenizer_info``'s ``added_tokens_decoder``."""
    decoder = info.get("added_tokens_decoder")
    if isinstance(decoder, str):  # vLLM 0.32 sends the dict's repr
        import ast

        try:
            decoder = ast.literal_eval(decoder)
        except (ValueError, SyntaxError):
            decoder = None
    if not isinstance(decoder, dict):
        return {}
    names = {}
    for key, value in decoder.items():
        text = value.get("content") if isinstance(value, dict) else value
        if isinstance(text, str):
            names[int(key)] = text
    return names


def info_specials(info: dict[str, Any] | None) -> list[str]:
    """The named special tokens (bos, eos, pad, unk, extra) in ``/tokenizer_info``."""
    if not info:
        return []
    found = [info.get(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token", "cls_token", "sep_token",
                                   "mask_token")]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        extra = info.get(key)
        found += list(extra.values()) if isinstance(extra, dict) else list(extra or [])
    return [t for t in found if isinstance(t, str) and t]


def _content_format(chat_template: str | None) -> str:
    """The content format vLLM detects for the server's chat template: vLLM's own rule, run here on the
    template the server sent ("unknown" when it sent none)."""
    if not chat_template:
        return "unknown"
    from vllm.renderers.hf import _detect_content_format

    return _detect_content_format(chat_template, default="string")


def _is_missing_route(text: str) -> bool:
    """FastAPI's answer for a path it does not serve (not vLLM's 404 for an unknown model)."""
    try:
        return json.loads(text) == {"detail": "Not Found"}
    except ValueError:
        return False


def _error_text(text: str, limit: int = 500) -> str:
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
