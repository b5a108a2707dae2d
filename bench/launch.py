"""From launch to the first answer: ``python app.py`` started, and a person who asks as soon as the page is up.

    python -m bench.launch [--model tiny-qwen2.5-vl] [--runs 2] [--out docs/launch.md]

Each run starts the app twice, with the start-up model's engine started at launch (the default) and at the first
question (``VLM_DEMO_START_AT_LAUNCH=0``, as before), alternating. Seconds from launch to: the page (its HTML
served), the engine's start markers as the app and vLLM log them (its core process up, its worker loading the model,
the model loaded, the engine ready) and the first question's whole answer (8 tokens, asked at once). Prints a
Markdown table (medians) and a RESULT line; ``--out`` writes the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from gradio_client import Client, handle_file

ROOT = Path(__file__).resolve().parent.parent
PICTURE = ROOT / "assets" / "bar-chart.png"
MARKS = {
    "engine process up": "Initializing a V1 LLM engine",
    "worker loading the model": "Starting to load model",
    "model loaded": "Initializing model took",
    "engine ready": "vlm_demo.engine.startup: started",
}
"""Start markers: a name, and the log line that shows it (the app's and vLLM's own lines)."""
LIMIT_S = 600.0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat_args(model: str) -> list:
    from vlm_demo.profile import load_registry
    from vlm_demo.settings import Settings
    from vlm_demo.ui.contract import api_inputs

    registry = load_registry(Settings.from_env().models_file)
    message = {"text": "What is in this picture?", "files": [handle_file(str(PICTURE))]}
    return api_inputs(registry, "chat", model, message, max_tokens=8)


def one_launch(model: str, at_launch: bool) -> dict[str, float]:
    """Seconds from launch to the page, to each start marker and to the first answer."""
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "VLM_DEMO_START_AT_LAUNCH": "1" if at_launch else "0"}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "app.py", "--model", model, "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen: dict[str, float] = {}

    def read() -> None:
        for line in proc.stdout or ():
            for name, text in MARKS.items():
                if text in line and name not in seen:
                    seen[name] = time.monotonic() - t0

    threading.Thread(target=read, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{port}/"
        while True:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() - t0 > LIMIT_S:
                raise SystemExit(f"the app did not come up (status {proc.poll()})")
            time.sleep(0.05)
        out = {"page": time.monotonic() - t0}
        Client(url, verbose=False).predict(*chat_args(model), api_name="/chat")
        out["first answer"] = time.monotonic() - t0
        while "engine ready" not in seen and time.monotonic() - t0 < LIMIT_S:
            time.sleep(0.05)
        return {**out, **seen}
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-qwen2.5-vl")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for _ in range(args.runs):
        for at_launch in (False, True):
            runs[at_launch].append(one_launch(args.model, at_launch))
            print(f"at launch={at_launch}: {runs[at_launch][-1]}", file=sys.stderr, flush=True)
    names = ["page", *MARKS, "first answer"]

    def median(at_launch: bool, name: str) -> float:
        return statistics.median(r[name] for r in runs[at_launch] if name in r)

    rows = [f"| seconds from launch ({args.model}, median of {args.runs}) | engine at the first question (before) "
            "| engine at launch (now) |", "|---|---|---|"]
    rows += [f"| {name} | {median(False, name):.1f} | {median(True, name):.1f} |" for name in names]
    table = "\n".join(rows)
    print(table)
    before, after = median(False, "first answer"), median(True, "first answer")
    print(f"RESULT first_answer_before_s={before:.1f} first_answer_after_s={after:.1f} "
          f"first_answer_after_vs_before={after / before:.2f}")
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
