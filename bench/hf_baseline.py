"""The baseline, served the way the popular VLM demos serve: transformers ``generate`` with a
``TextIteratorStreamer`` in a thread, one request at a time.

Same architecture and sizes as the app's tiny model (its config and processor), random weights saved
with ``save_pretrained`` and loaded back with ``from_pretrained``. Prints one JSON object.

    python -m bench.hf_baseline --model tiny-qwen2.5-vl --requests 8 --max-tokens 128 [--dtype bfloat16] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time

import torch
from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor, TextIteratorStreamer

from vlm_demo.settings import Settings
from vlm_demo.tiny_models import tiny_model_dir

from .common import MODELS, QUESTION, picture


class TimedStreamer(TextIteratorStreamer):
    """A ``TextIteratorStreamer`` that also notes when the first generated token arrived (its text may
    be held back until a word ends, so the token, not the text, is the fair first-token time)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.first_token_at = 0.0
        self.tokens = 0

    def put(self, value):
        if not self.next_tokens_are_prompt:
            if not self.first_token_at:
                self.first_token_at = time.perf_counter()
            self.tokens += value.numel()
        super().put(value)


def load(model: str, dtype: torch.dtype):
    """The tiny model's processor, and a model with its architecture and sizes: random weights saved and
    loaded back as a demo would load a checkpoint."""
    source = tiny_model_dir(MODELS[model], Settings.from_env().cache_dir / "tiny-models")
    processor = AutoProcessor.from_pretrained(source)
    config = AutoConfig.from_pretrained(source)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        AutoModelForImageTextToText.from_config(config).save_pretrained(tmp)
        net = AutoModelForImageTextToText.from_pretrained(tmp, dtype=dtype).eval()
    return processor, net


def answer(processor, net, image, max_tokens: int) -> tuple[float, float, int]:
    """One request as a demo serves it: (time to first token, total time, tokens)."""
    t0 = time.perf_counter()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(text=[text], images=[image], return_tensors="pt").to(net.dtype)
    streamer = TimedStreamer(processor.tokenizer, skip_prompt=True, skip_special_tokens=True)
    kwargs = dict(**inputs, streamer=streamer, max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                  do_sample=True, temperature=0.7, top_p=0.9)
    worker = threading.Thread(target=net.generate, kwargs=kwargs)
    worker.start()
    shown = ""
    for piece in streamer:  # what the demo would stream to its page
        shown += piece
    worker.join()
    return streamer.first_token_at - t0, time.perf_counter() - t0, streamer.tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=list(MODELS), required=True)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--distinct-pictures", action="store_true", help="a different picture per request")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    processor, net = load(args.model, getattr(torch, args.dtype))
    with torch.inference_mode():
        answer(processor, net, picture(0), 8)  # warm-up
        runs = []
        t0 = time.perf_counter()
        for i in range(args.requests):
            runs.append(answer(processor, net, picture(10_000 + i if args.distinct_pictures else 0), args.max_tokens))
        wall = time.perf_counter() - t0
    json.dump({"model": args.model, "dtype": args.dtype, "threads": torch.get_num_threads(), "wall_s": wall,
               "runs": [{"ttft_s": a, "total_s": b, "tokens": n} for a, b, n in runs]}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
