"""The OpenAI chat-completions request, written once: the app's messages as the API carries them, and the
request body (the prompt: model, per-request processor kwargs, media loading options, messages; then the
sampling). The remote engine posts it, Export writes it out, the benchmark and the tests' servers send it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InputError
from ..intake import png_data_url
from ..registry import Sampling
from .media_parts import AUDIO_RATE, with_audio_io

EMBEDS_LEFT_OUT = "(precomputed image embeddings: not exported)"
"""What an exported request says where the app's request had image embeddings (JSON cannot carry them)."""

USAGE = {"stream_options": {"include_usage": True}}
"""Ask a streaming server for the usage (prompt and completion tokens, cached tokens) in its last chunk."""


MEDIA_PARTS = ("image_url", "video_url", "audio_url")
"""The wire's picture, video and sound parts (each with its URL and its ``uuid``)."""


def media_uuid(url: str) -> str:
    """A picture's or clip's ``uuid`` on the wire: the hash of its data URL. vLLM keys its processor cache by it
    (mixed with the request's processor and loading options), so a part the server has processed can go again as
    its uuid alone (``by_reference``)."""
    return hashlib.sha256(url.encode()).hexdigest()


def wire_message(message: Mapping[str, Any], leave_out_embeds: bool = False) -> dict[str, Any]:
    """One message (``service.to_openai_messages``) as the OpenAI API carries it: decoded images as PNG data
    URLs, videos as the ``video_url`` data URLs they already are, clips as 16-bit WAVs at 16 kHz (the rate of every
    audio model vLLM serves: a server decodes them with libsndfile and resamples nothing, so it hears the samples
    the local engine does), each with its content hash as ``uuid``
    (``media_uuid``), a system prompt or earlier answer (one text
    part) as plain text, as OpenAI clients write them (vLLM reads a string as that one text part: the same
    render). Image embeddings cannot go to a server (``InputError``); ``leave_out_embeds``: a text part says
    they were left out instead (Export)."""
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    if message.get("role") != "user" and len(content) == 1 and content[0].get("type") == "text":
        return {**message, "content": content[0]["text"]}
    parts = []
    for part in content:
        if part.get("type") == "image_pil":
            url = png_data_url(part["image_pil"])
            parts.append({"type": "image_url", "image_url": {"url": url}, "uuid": media_uuid(url)})
        elif part.get("type") == "video_url":
            parts.append({**part, "uuid": media_uuid(part["video_url"]["url"])})
        elif part.get("type") == "audio_clip":  # (at the rate the local engine sends it: ``AUDIO_RATE``)
            url = part["audio_clip"].wav_data_url(AUDIO_RATE)
            parts.append({"type": "audio_url", "audio_url": {"url": url}, "uuid": media_uuid(url)})
        elif part.get("type") == "image_embeds" and leave_out_embeds:
            parts.append({"type": "text", "text": EMBEDS_LEFT_OUT})
        elif part.get("type") == "image_embeds":
            raise InputError("precomputed image embeddings go to an in-process engine only, not to a remote server")
        else:
            parts.append(part)
    return {**message, "content": parts}


def media_uuids(body: Mapping[str, Any]) -> tuple[str, ...]:
    """The uuids of ``body``'s pictures and clips (a ``prompt_body`` or ``request_body``), in order."""
    return tuple(part["uuid"] for m in body["messages"] if isinstance(m.get("content"), list)
                 for part in m["content"] if part.get("type") in MEDIA_PARTS and part.get("uuid"))


def by_reference(body: Mapping[str, Any], known: Callable[[str], bool]) -> Mapping[str, Any]:
    """``body`` with each picture or clip whose uuid is ``known`` sent by reference: its uuid and a null URL, which
    vLLM 0.32 fills from its processor cache (a server without it answers 400, "Cache miss"). ``body`` itself
    when no part is known."""
    messages, changed = [], False
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            parts = [{"type": part["type"], part["type"]: None, "uuid": part["uuid"]}
                     if part.get("type") in MEDIA_PARTS and part.get("uuid") and known(part["uuid"]) else part
                     for part in content]
            if any(new is not old for new, old in zip(parts, content)):
                message, changed = {**message, "content": parts}, True
        messages.append(message)
    return {**body, "messages": messages} if changed else body


def prompt_body(model: str, messages: Sequence[Mapping[str, Any]], mm_kwargs: Mapping[str, Any] | None = None,
                media_io: Mapping[str, Mapping[str, Any]] | None = None,
                leave_out_embeds: bool = False) -> dict[str, Any]:
    """The request's prompt, what vLLM renders (``/v1/chat/completions/render`` and ``/tokenize`` take it too):
    the served model's name, the per-request processor kwargs, the media loading options (how vLLM's loader
    samples each video; reads the clips: ``media_parts.with_audio_io``) and the messages on the wire (``wire_message``)."""
    body: dict[str, Any] = {"model": model}
    if mm_kwargs:
        body["mm_processor_kwargs"] = dict(mm_kwargs)
    wired = [wire_message(m, leave_out_embeds) for m in messages]
    if any(p.get("type") == "audio_url" for m in wired if isinstance(m.get("content"), list) for p in m["content"]):
        media_io = with_audio_io(media_io, mm_kwargs or {})
    if media_io:
        body["media_io_kwargs"] = {m: dict(v) for m, v in media_io.items()}
    body["messages"] = wired
    return body


def request_body(prompt: Mapping[str, Any], sampling: Sampling, keep_special_tokens: bool = False,
                 stream: bool = True) -> dict[str, Any]:
    """The whole chat-completions request: ``prompt`` (``prompt_body``) with ``sampling`` as vLLM's request
    fields (seed, ``ignore_eos``, the structured-outputs regex and ``vllm_xargs`` where set), the settings first where a reader
    sees them, the messages (pictures and all) last. ``keep_special_tokens``: the answer keeps special tokens
    (a grounding format's tags are special tokens); the app drops those it does not keep itself."""
    body = {key: value for key, value in prompt.items() if key != "messages"}
    body |= {"max_tokens": sampling.max_tokens, "temperature": sampling.temperature, "top_p": sampling.top_p,
             "stream": stream}
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.ignore_eos:
        body["ignore_eos"] = True
    if sampling.regex is not None:  # vLLM's own request field (structured outputs)
        body["structured_outputs"] = {"regex": sampling.regex}
    if sampling.extra_args:  # vLLM's own request field: the logits processors' per-request arguments
        body["vllm_xargs"] = dict(sampling.extra_args)
    if keep_special_tokens:
        body["skip_special_tokens"] = False
    body["messages"] = prompt["messages"]
    return body
