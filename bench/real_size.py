"""The benchmark at a real checkpoint's size: Qwen2.5-VL-3B-Instruct's dimensions with random weights.

    python bench/real_size.py [--max-tokens 32] [--smoke] [--out DIR]

The tiny models' engine work is so small that the app's own Python shows in every figure; this measures the same
paths on a model of the checkpoint's size: the tiny Qwen2.5-VL builder with ``CHECKPOINT_SIZES`` (36 layers of
2048, the 32-block vision tower, the 151936-row vocabulary; the same tokenizer, processor and chat template), built
offline into the run's folder, random weights (``load_format=dummy``) in bfloat16, in a registry file of its own
(``VLM_DEMO_MODELS_FILE``). At 1 and 4 streams, ``--max-tokens`` per answer with ``ignore_eos``, the benchmark's
640x480 picture resized to at most ``MAX_PIXELS`` (54 image tokens, so the vision tower's prefill takes seconds on
2 cores): the raw ``AsyncLLM`` and the chat service (``bench.engine_load``), the app through users of the page's
own protocol (``bench.app_server``, ``bench.browser_load``) and ``vllm serve`` (``bench.serve_load``), one engine
alive at a time. Writes ``benchmark-real-size.md`` and ``.json`` into ``--out`` (``docs/`` by default), its
summary into ``benchmark.md`` there, and ends with the RESULT line's figures for this configuration:

    RESULT real_size app_vs_raw=R1 app_vs_serve=R2 ttft_app_minus_raw_ms=T app_cpu_per_token_vs_serve=C
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/real_size.py` from a fresh clone
    sys.path.insert(0, str(ROOT))

from bench import run  # noqa: E402
from bench.common import IMAGE_SIZE, Load, Result, machine, pct, write_pictures  # noqa: E402
from bench.report import (cpu_per_token_vs_serve, ratios, real_size_result_line, ttft_minus_raw_ms,  # noqa: E402
                          write_real_size)

MODEL = "qwen2.5-vl-3b-size"
"""The configuration's registry name."""
MAX_PIXELS = 50176
"""The processor's largest resized area (64 tokens of 28x28 px): the engine starts with it, every path sends it."""
KV_CACHE_GIB = 0.25
"""The engine's KV cache (36 KiB per token at this size: about 7000 tokens)."""


def entry(model_dir: Path, max_tokens: int) -> dict:
    """The registry entry: the model directory with random weights in bfloat16, a small context, one picture per
    prompt, and ``max_pixels`` as a control with a default (so the raw engine, the app and ``vllm serve`` all
    resize the picture alike)."""
    return {"name": MODEL, "label": "Qwen2.5-VL 3B size", "family": "qwen2_5_vl", "path": str(model_dir),
            "engine_args": {"max_model_len": 4096, "dtype": "bfloat16", "limit_mm_per_prompt": {"image": 1},
                            "load_format": "dummy", "enforce_eager": True, "max_num_seqs": 4},
            "controls": [{"kwarg": "max_pixels", "label": "max_pixels (28x28 px per token)", "min": 3136,
                          "max": MAX_PIXELS, "step": 784, "default": MAX_PIXELS}],
            "sampling": {"temperature": 0.7, "top_p": 0.9, "max_tokens": max_tokens}}


def prepare(work: Path, max_tokens: int) -> dict:
    """Build the model directory and its registry file under ``work`` and point this process (and the servers it
    starts) at them; the entry."""
    import yaml

    from vlm_demo.tiny_models.qwen2_5_vl import CHECKPOINT_SIZES, build

    model_dir = work / MODEL
    model_dir.mkdir()
    build(model_dir, CHECKPOINT_SIZES)
    spec = entry(model_dir, max_tokens)
    registry = work / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": [spec]}, sort_keys=False))
    os.environ.update(VLM_DEMO_MODELS_FILE=str(registry), VLM_DEMO_CPU_KV_CACHE_GIB=str(KV_CACHE_GIB))
    return spec


def image_tokens() -> int:
    """Tokens of the benchmark's picture at ``MAX_PIXELS`` (one per 28x28 cell of the resized picture)."""
    from vlm_demo.families.qwen2_5_vl import MIN_PIXELS, resized

    w, h = resized(*IMAGE_SIZE, MIN_PIXELS, MAX_PIXELS)
    return w * h // (28 * 28)


def headline(data: dict, streams: int) -> dict:
    """The RESULT line's figures for this configuration (``report.headline``'s, one model): the page-protocol
    users' tokens/s over the raw engine's and vllm serve's at ``streams``, their first token over the raw engine's
    at 1 user, the app process's CPU per token over vllm serve's API server's at ``streams``."""
    r = ratios(data, MODEL, streams)
    return {"app_vs_raw": r["page_vs_raw"], "app_vs_serve": r["page_vs_serve"],
            "ttft_app_minus_raw_ms": ttft_minus_raw_ms(data, MODEL, "browser"),
            "app_cpu_per_token_vs_serve": cpu_per_token_vs_serve(data, MODEL, streams)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per answer (ignore_eos)")
    p.add_argument("--smoke", action="store_true", help="4 tokens, warm-up on the in-process engine only: checks "
                   "the run end to end (written to bench/results-quick/ unless --out says otherwise)")
    p.add_argument("--out", type=Path, default=None, help="where the report goes (default: docs/)")
    args = p.parse_args(argv)
    tokens = 4 if args.smoke else args.max_tokens
    out_dir = args.out or (ROOT / ("bench/results-quick" if args.smoke else "docs"))
    loads = [Load(1, 1, tokens), Load(4, 1, tokens)]
    warm = Load(1, 1, 4)  # the first question's one-time costs (oneDNN's kernels, the first encoder run)
    from bench.engine_load import measure
    from vlm_demo.settings import Settings

    started = time.perf_counter()
    info = {"machine": machine(), "mode": "smoke" if args.smoke else "full",
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "loads": [vars(ld) for ld in loads]}
    results: list[Result] = []
    starts: dict[str, float] = {}
    phases: dict[str, float] = {}

    def logged(r: Result) -> Result:
        run.log(f"  {r.path:8} {r.streams} streams: {r.tokens_per_s:6.1f} tokens/s, "
                f"TTFT p50 {pct(r.ttft_s, 50) * 1000:.0f} ms")
        return r

    with tempfile.TemporaryDirectory(prefix="vlm-bench-real-size-") as tmp:
        work = Path(tmp)
        info["entry"] = prepare(work, tokens)
        info.update(image_tokens=image_tokens(), max_pixels=MAX_PIXELS, kv_cache_gib=KV_CACHE_GIB)
        picture = write_pictures(work / "pictures", 1)[0]
        run.log(f"bench real size: {MODEL}, {info['image_tokens']} image tokens, {tokens} tokens per answer")
        run.log("[raw engine + chat service]")
        t0 = time.perf_counter()
        res, insp, _ = asyncio.run(measure(MODEL, loads, 0, log=run.log, conversation_runs=0, warm=warm))
        starts["in-process engine (with one inspect)"] = insp["engine_inspect_s"]
        results += res
        phases["raw engine and chat service"] = time.perf_counter() - t0
        run.log("[app, page-protocol users]")
        t0 = time.perf_counter()
        interval = Settings.from_env().ui_update_interval_s
        server = run.AppServer(MODEL, interval, work)
        try:
            starts["app engine (after its page came up)"] = server.load_model(MODEL)
            if not args.smoke:
                server.users(MODEL, warm, picture, "browser")
            for load in loads:
                results.append(logged(run.gradio_result(MODEL, load, server.users(MODEL, load, picture, "browser"),
                                                        "browser")))
        finally:
            server.close()
        phases["app"] = time.perf_counter() - t0
        run.log("[vllm serve]")
        t0 = time.perf_counter()
        peer = run.ServeServer(MODEL, work)
        starts["vllm serve start"] = time.perf_counter() - t0
        try:
            if not args.smoke:
                peer.users(MODEL, warm, picture)
            for load in loads:
                results.append(logged(run.serve_result(MODEL, load, peer.users(MODEL, load, picture))))
        finally:
            peer.close()
        phases["vllm serve"] = time.perf_counter() - t0

    info["duration_s"] = round(time.perf_counter() - started, 1)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    data = {**info, "model": MODEL, "starts_s": {k: round(v, 1) for k, v in starts.items()},
            "phases_s": {k: round(v, 1) for k, v in phases.items()},
            "results": [r.summary() for r in results], "ttft_samples": {f"{r.path}/{r.streams}": r.ttft_s
                                                                        for r in results},
            "gradio_cpu_per_request_s": run.CPU_LOG, "serve_cpu": run.SERVE_CPU}
    data["headline"] = headline(data, max(ld.streams for ld in loads))

    write_real_size(data, out_dir)
    run.log(f"bench real size: wrote {out_dir}/benchmark-real-size.md in {info['duration_s']:.0f} s")
    print(real_size_result_line(data["headline"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
