"""Benchmark: a 10-s clip through the page against ``vllm serve``, for a model that listens (issue 47's row).

    python -m bench.clip [--model tiny-qwen2-audio] [--seconds 10] [--max-tokens 128] [--out docs]

In one run on this machine: the app as it is served (``bench.app_server``) with ``gradio_client`` users attaching the
clip (a microphone's 48 kHz stereo WAV: the app resamples it) at 1 and 4 users, and vLLM's own OpenAI server with the
engine arguments the app gives its engine, with streaming clients sending what the app's wire sends (the clip as a
16-kHz WAV). Writes ``benchmark-audio.md`` and ``.json`` into ``--out`` and ends with one line:

    RESULT clip_app_vs_serve_1=R1 clip_app_vs_serve_4=R4 clip_ttft_app_minus_serve_ms=T clip_tokens=N
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/clip.py` from a fresh clone
    sys.path.insert(0, str(ROOT))

from bench.common import Load, machine, pct  # noqa: E402
from bench.run import AppServer, ServeServer, gradio_result, log, serve_result  # noqa: E402

STREAMS = (1, 4)


def write_clip(path: Path, seconds: float) -> Path:
    """A 440-Hz tone with a slow swell, 48 kHz stereo (a microphone's), 16-bit WAV."""
    import numpy as np
    import soundfile as sf

    rate = 48_000
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * np.pi * 440 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 0.2 * t))
    sf.write(path, np.stack([wave, wave], axis=1), rate, subtype="PCM_16")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-qwen2-audio")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--per-user", type=int, default=4)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-clip-"))
    clip = write_clip(work / "clip.wav", args.seconds)
    loads = [Load(n, args.per_user, args.max_tokens) for n in STREAMS]
    results = []
    t0 = time.perf_counter()
    log(f"[app] {args.model}, a {args.seconds:g}-s clip")
    app = AppServer(args.model, 0.1, work)
    try:
        app.users(args.model, Load(1, 1, 8), clip)  # (warm-up: the engine's first question)
        for load in loads:
            results.append(gradio_result(args.model, load, app.users(args.model, load, clip)))
            log(f"  app {load.streams} users: {results[-1].tokens_per_s:.0f} tokens/s")
    finally:
        app.close()
    log(f"[vllm serve] {args.model}")
    serve = ServeServer(args.model, work)
    try:
        serve.users(args.model, Load(1, 1, 8), clip)
        for load in loads:
            results.append(serve_result(args.model, load, serve.users(args.model, load, clip)))
            log(f"  serve {load.streams} users: {results[-1].tokens_per_s:.0f} tokens/s")
    finally:
        serve.close()
    by = {(r.path, r.streams): r for r in results}
    ratio = {n: by[("gradio", n)].tokens_per_s / by[("serve", n)].tokens_per_s for n in STREAMS}
    ttft = 1000 * (pct(by[("gradio", 1)].ttft_s, 50) - pct(by[("serve", 1)].ttft_s, 50))
    from vlm_demo.settings import Settings
    from vlm_demo.intake import load_audio

    tokens = round(min(args.seconds, 30.0) * 25)  # (Qwen2-Audio's and Omni's 25 a second; Qwen2-Audio's 30-s cap)
    summary = {"model": args.model, "seconds": args.seconds, "clip_tokens": tokens, "max_tokens": args.max_tokens,
               "machine": machine(), "wall_s": round(time.perf_counter() - t0, 1),
               "results": [r.summary() for r in results],
               "ratios": {f"app_vs_serve_{n}": round(ratio[n], 3) for n in STREAMS},
               "ttft_app_minus_serve_ms": round(ttft, 1),
               "clip": {"rate": load_audio(clip, Settings.from_env(), "clip.wav").rate}}
    line = (f"RESULT clip_app_vs_serve_1={ratio[1]:.2f} clip_app_vs_serve_4={ratio[4]:.2f} "
            f"clip_ttft_app_minus_serve_ms={ttft:.0f} clip_tokens={tokens}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "benchmark-audio.json").write_text(json.dumps(summary, indent=1))
        rows = "\n".join(f"| {r.path} | {r.streams} | {r.tokens_per_s:.0f} | {1000 * pct(r.ttft_s, 50):.0f} | "
                         f"{1000 * pct(r.ttft_s, 95):.0f} |" for r in results)
        (args.out / "benchmark-audio.md").write_text(
            f"# A {args.seconds:g}-s clip: the page against `vllm serve`\n\n"
            f"`python -m bench.clip --out docs` ({args.model}, a 48 kHz stereo WAV the app resamples to 16 kHz: "
            f"{tokens} audio tokens; {args.max_tokens} tokens an answer, {args.per_user} questions a user; both "
            f"sides in one run, {summary['wall_s']:g} s). `gradio`: `gradio_client` users attaching the clip to the "
            "page; `serve`: streaming clients of vLLM's own server with what the app's wire sends.\n\n"
            "| path | users | tokens/s | TTFT p50 ms | TTFT p95 ms |\n|---|---|---|---|---|\n" + rows + "\n\n"
            f"`{line}`\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
