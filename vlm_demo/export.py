"""Export a request as what ``vllm serve`` takes: OpenAI chat-completions JSON (with
``mm_processor_kwargs``), a curl command and a Python ``openai`` snippet."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

from PIL import Image

from .registry import ModelSpec
from .service import ChatRequest


def data_url(image: Image.Image) -> str:
    """The image as a lossless PNG data URL (the server decodes the same pixels). Fast compression: the
    export is built for every answer, and level 1 encodes several times faster than the default."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def chat_completions_body(request: ChatRequest, spec: ModelSpec, stream: bool = True) -> dict[str, Any]:
    """The OpenAI-compatible request body that replays ``request`` against ``vllm serve``."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for turn in request.turns:
        parts: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": data_url(im)}} if isinstance(im, Image.Image)
            else {"type": "text", "text": "(precomputed image embeddings: not exported)"} for im in turn.images]
        parts.append({"type": "text", "text": turn.text})
        messages.append({"role": turn.role, "content": parts if turn.role == "user" else turn.text})
    sampling = request.sampling or spec.sampling
    body: dict[str, Any] = {
        "model": spec.repo or spec.path or spec.name,
        "messages": messages,
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "stream": stream,
    }
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    mm_kwargs = {**spec.default_mm_kwargs(), **request.mm_kwargs}
    if mm_kwargs:
        body["mm_processor_kwargs"] = mm_kwargs
    return body


def serve_command(spec: ModelSpec) -> str:
    """The ``vllm serve`` command the exported request is meant for."""
    args = [f"vllm serve {spec.repo or spec.path or spec.name}", "--trust-request-mm-kwargs"]
    for key, value in spec.engine_args.to_vllm().items():
        if key in ("load_format",) and spec.tiny:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                args.append(flag)
        else:
            args.append(f"{flag} '{json.dumps(value)}'" if isinstance(value, dict) else f"{flag} {value}")
    if spec.startup_mm_kwargs():
        args.append(f"--mm-processor-kwargs '{json.dumps(spec.startup_mm_kwargs())}'")
    return " \\\n  ".join(args)


def curl_command(base_url: str = "http://localhost:8000") -> str:
    """curl that posts the exported JSON (saved as request.json)."""
    return (f"curl -sN {base_url}/v1/chat/completions \\\n  -H 'Content-Type: application/json' \\\n"
            "  -d @request.json")


def python_snippet(body: dict[str, Any], base_url: str = "http://localhost:8000") -> str:
    """An ``openai`` client snippet that sends the exported JSON (saved as request.json)."""
    extra = ('\n    extra_body={"mm_processor_kwargs": body["mm_processor_kwargs"]},'
             if "mm_processor_kwargs" in body else "")
    seed = "\n    seed=body[\"seed\"]," if "seed" in body else ""
    return f'''import json
from openai import OpenAI

body = json.load(open("request.json"))
client = OpenAI(base_url="{base_url}/v1", api_key="EMPTY")
stream = client.chat.completions.create(
    model=body["model"],
    messages=body["messages"],
    max_tokens=body["max_tokens"],
    temperature=body["temperature"],
    top_p=body["top_p"],{seed}
    stream=True,{extra}
)
for chunk in stream:
    print(chunk.choices[0].delta.content or "", end="", flush=True)
'''
