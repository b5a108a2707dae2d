"""Streaming chat-completion clients of vLLM's own OpenAI server (what ``vllm serve`` runs), in their own
process as the app's ``gradio_client`` users are: each of ``--users`` asks ``--per-user`` questions back to
back, with the same picture (or clip), question and sampling as the app's load. Prints one JSON object.

    python -m bench.serve_load --url URL --model NAME --users 8 --per-user 4 --max-tokens 256 --picture FILE
        [--allowed-token-ids FILE]
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from pathlib import Path

import httpx

from vlm_demo.engine.openai_request import USAGE, prompt_body, request_body
from vlm_demo.registry import Sampling

from .common import QUESTION, run_users, users_parser


def body(model: str, picture: Path, max_tokens: int, allowed: list[int] | None) -> dict:
    """The request: the picture as a PNG data URL (a clip, by its suffix: as the app's wire sends it, a 16-kHz WAV),
    the question, the app's sampling for this load (the app's own request body, ``engine.openai_request``, with the
    usage in the last chunk)."""
    from vlm_demo.intake import is_audio_name, load_audio
    from vlm_demo.settings import Settings

    if is_audio_name(picture.name):
        part = {"type": "audio_clip", "audio_clip": load_audio(picture, Settings.from_env(), picture.name)}
    else:
        url = "data:image/png;base64," + base64.b64encode(picture.read_bytes()).decode()
        part = {"type": "image_url", "image_url": {"url": url}}
    messages = [{"role": "user", "content": [part, {"type": "text", "text": QUESTION}]}]
    sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=max_tokens, ignore_eos=True)
    out = request_body(prompt_body(model, messages), sampling) | USAGE
    if allowed is not None:  # the app's tiny models sample printable tokens only; so does the peer
        out["allowed_token_ids"] = allowed
    return out


async def ask(client: httpx.AsyncClient, request: dict) -> tuple[float, int]:
    """One streamed answer: time to the first content text, completion tokens (from the usage chunk)."""
    t0 = time.perf_counter()
    ttft, tokens = 0.0, 0
    async with client.stream("POST", "/v1/chat/completions", json=request) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or ():
                if not ttft and (choice.get("delta") or {}).get("content"):
                    ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return ttft or time.perf_counter() - t0, tokens


async def load(url: str, request: dict, users: int, per_user: int) -> dict:
    limits = httpx.Limits(max_connections=users, max_keepalive_connections=users)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits, trust_env=False) as client:
        return await run_users(lambda: ask(client, request), users, per_user, (httpx.HTTPError, ValueError))


def main(argv: list[str] | None = None) -> int:
    p = users_parser(__doc__)
    p.add_argument("--allowed-token-ids", type=Path, default=None, help="a JSON list of token ids")
    args = p.parse_args(argv)
    allowed = json.loads(args.allowed_token_ids.read_text()) if args.allowed_token_ids else None
    request = body(args.model, Path(args.picture), args.max_tokens, allowed)
    json.dump(asyncio.run(load(args.url, request, args.users, args.per_user)), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
