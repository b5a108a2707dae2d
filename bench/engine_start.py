"""An engine's start, phase by phase: vLLM's own process start (``spawn``, before) against the app's (a forkserver that
imported torch and vLLM once; now).

    python -m bench.engine_start [--runs 2] [--real-size] [--out docs/launch.md]

Each run is a fresh process per way of starting (alternating), which does what the app does: it makes its engine
manager (which starts the forkserver), then at once starts model A (``at launch``: as the CLI does; the app's page
takes longer to come up than the forkserver to import, so its first start finds it ready),
switches to model B (A stopped, B started: ``switch``) and back to A (``switch back``), each start with one question
answered after it. The phases come from the app's own marks and vLLM's log lines, timed to the millisecond:

- stopping the previous engine: a switch's (one engine at a time here, ``VLM_DEMO_MAX_ENGINES=1``: the app keeps
  recent engines warm, and a switch back to a warm one starts nothing);
- config and processor: the app reads the model's configuration (vLLM's config; the tiny model's files checked);
- engine core process: its process begins, up to vLLM's "Initializing a V1 LLM engine" (spawn: a new interpreter
  importing torch and vLLM);
- worker process: the core sets up its executor and the worker's process begins, up to "Starting to load model";
- weights: up to "Initializing model took" (random weights here; a checkpoint's load on a real machine);
- profiling, KV cache and warm-up: up to vLLM's "init engine (profile, create kv cache, warmup model) took";
- ready: the core's hand-over to the app and the app's own checks, up to the engine the app serves from.

``--real-size``: Qwen2.5-VL-3B-Instruct's dimensions with random weights (``bench/real_size.py``'s configuration)
instead of the tiny Qwen2.5-VL and LLaVA-1.5; A and B are then the same model (one start, one restart). Prints a
Markdown table (medians) and a RESULT line; ``--out`` writes the table into that file's "engine start" section.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODES = {"before": "0", "now": "1"}
"""Ways of starting: ``VLM_DEMO_FORKSERVER`` for each (vLLM's spawn, the app's forkserver)."""
STEPS = ("at launch", "switch", "switch back")
PHASES = {
    "stopping the previous engine": None,
    "config and processor": None,
    "engine core process": "Initializing a V1 LLM engine",
    "worker process": "Starting to load model",
    "weights": re.compile(r"Initializing model took|Model loading took|Loading weights took"),
    "profiling, KV cache and warm-up": "init engine (profile, create kv cache, warmup model) took",
    "ready": None,
}
"""Each phase, and the log line that ends it (None: the app's own mark)."""
SECTION = "## Engine start by phase"
REAL_SECTION = "## Engine start by phase, at Qwen2.5-VL-3B's size"


def log_config(path: Path) -> Path:
    """A vLLM logging configuration that also writes every process's lines, with their time, to ``path``."""
    from vllm.logger import DEFAULT_LOGGING_CONFIG

    config = copy.deepcopy(DEFAULT_LOGGING_CONFIG)
    config["formatters"]["timed"] = {"class": "logging.Formatter", "format": "%(created).3f %(message)s"}
    config["handlers"]["timed"] = {"class": "logging.FileHandler", "filename": str(path), "formatter": "timed",
                                   "level": "INFO"}
    config["loggers"]["vllm"]["handlers"] = [*config["loggers"]["vllm"]["handlers"], "timed"]
    out = path.with_suffix(".json")
    out.write_text(json.dumps(config))
    return out


def phases(marks: dict[str, float], lines: list[tuple[float, str]]) -> dict[str, float]:
    """Seconds per phase of one start: ``marks`` (the app's: ``call``, ``config``, ``ready``) and the log lines
    written between the call and ready."""
    ends = {"stopping the previous engine": marks.get("stopped", marks["call"]), "config and processor": marks["config"],
            "ready": marks["ready"]}
    for name, text in PHASES.items():
        if text is None:
            continue
        for t, line in lines:
            if marks["call"] <= t <= marks["ready"] and (text in line if isinstance(text, str) else text.search(line)):
                ends[name] = t
                break
    out, last = {}, marks["call"]
    for name in PHASES:
        end = ends.get(name, last)
        out[name] = max(0.0, end - last)
        last = max(last, end)
    out["total"] = marks["ready"] - marks["call"]
    return out


async def child(models: list[str], log: Path) -> dict[str, dict[str, float]]:
    """This process as the app: its engine manager, then A at launch, B, A again; each start's phases."""
    from PIL import Image

    from vlm_demo.engine import EngineManager
    from vlm_demo.profile import load_registry
    from vlm_demo.registry import Sampling
    from vlm_demo.service import ChatRequest, ChatService, Done, Turn
    from vlm_demo.settings import Settings

    class Marked(EngineManager):
        """The app's manager, noting when a start's configuration is read (its start's own report)."""

        marks: dict[str, float] = {}

        def _phase(self, name: str, phase: str, **fields: int) -> None:
            if phase.startswith(("building", "reading", "downloading")):
                self.marks.setdefault("stopped", time.time())
            if phase.startswith("starting vLLM"):
                self.marks["config"] = time.time()
            super()._phase(name, phase, **fields)

    settings = Settings.from_env()
    registry = load_registry(settings.models_file)
    engines = Marked(settings)
    engines.warm()
    service = ChatService(registry, engines, settings)
    picture = Image.new("RGB", (640, 480), (200, 120, 40))
    out = {}
    for step, name in zip(STEPS, models, strict=True):
        marks = engines.marks = {"call": time.time()}
        if engines.running(registry.get(name)) is not None:  # the same model again (--real-size): a restart
            await engines.shutdown(name)
            marks["stopped"] = time.time()
        await engines.get(registry.get(name))
        marks["ready"] = time.time()
        request = ChatRequest(model=name, turns=(Turn("user", "Describe it.", {"image": (picture,)}),),
                              sampling=Sampling(temperature=0.0, max_tokens=8, ignore_eos=True))
        done = [event async for event in service.chat(request)][-1]
        assert isinstance(done, Done), done
        lines = []
        for line in log.read_text(errors="replace").splitlines():
            head, _, rest = line.partition(" ")
            try:
                lines.append((float(head), rest))
            except ValueError:
                continue
        out[step] = phases(marks, lines)
    engines.shutdown_all()
    return out


def run_child(mode: str, models: list[str], work: Path) -> dict[str, dict[str, float]]:
    """One fresh process starting engines the ``mode`` way; its phases per step."""
    log = work / f"{mode}-{time.monotonic_ns()}.log"
    # one engine at a time: every step starts one (the app keeps recent ones warm: a switch back then starts nothing)
    env = {**os.environ, "VLM_DEMO_FORKSERVER": MODES[mode], "VLLM_LOGGING_CONFIG_PATH": str(log_config(log)),
           "VLM_DEMO_MAX_ENGINES": "1"}
    done = subprocess.run([sys.executable, "-m", "bench.engine_start", "--child", json.dumps([*models, str(log)])],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{mode}: the run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(runs: dict[str, list[dict[str, dict[str, float]]]], title: str) -> str:
    """The medians as a Markdown table: phases down, each step's before and now across."""
    head = f"| {title} |" + "".join(f" {step}: before | {step}: now |" for step in STEPS)
    rows = [head, "|---" * (1 + 2 * len(STEPS)) + "|"]
    for phase in [*PHASES, "total"]:
        cells = []
        for step in STEPS:
            for mode in MODES:
                cells.append(f"{statistics.median(r[step][phase] for r in runs[mode]):.2f}")
        name = f"**{phase}**" if phase == "total" else phase
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def write_section(path: Path, text: str, heading: str = SECTION) -> None:
    """``text`` as the file's section under ``heading`` (the heading line kept; replaced where there is one, else
    added at the end)."""
    old = path.read_text() if path.exists() else ""
    head, found, rest = old.partition(heading + "\n")
    tail = rest[rest.find("\n## "):] if found and "\n## " in rest else ""
    path.write_text((head.rstrip() + "\n\n" if head.strip() else "") + heading + "\n\n" + text.rstrip() + "\n" + tail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--real-size", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        *models, log = json.loads(args.child)
        print(json.dumps(asyncio.run(child(models, Path(log)))))
        return
    with tempfile.TemporaryDirectory(prefix="engine-start-") as tmp:
        work = Path(tmp)
        if args.real_size:
            from bench.real_size import MODEL, prepare

            prepare(work, 8)
            models, title = [MODEL, MODEL, MODEL], "seconds, Qwen2.5-VL-3B size (random weights)"
        else:
            models, title = ["tiny-qwen2.5-vl", "tiny-llava-1.5", "tiny-qwen2.5-vl"], "seconds, tiny models"
        runs: dict[str, list] = {mode: [] for mode in MODES}
        for _ in range(args.runs):
            for mode in MODES:
                runs[mode].append(run_child(mode, models, work))
                print(f"{mode}: {json.dumps({s: round(p['total'], 2) for s, p in runs[mode][-1].items()})}",
                      file=sys.stderr, flush=True)
    text = table(runs, f"{title}, median of {args.runs}")
    total = {mode: {step: statistics.median(r[step]["total"] for r in runs[mode]) for step in STEPS} for mode in MODES}
    kind = "real_size" if args.real_size else "tiny"
    result = f"RESULT engine_start {kind} " + " ".join(
        f"{step.replace(' ', '_')}_s={total['before'][step]:.1f}->{total['now'][step]:.1f}" for step in STEPS)
    print(text)
    print(result)
    if args.out:
        command = " ".join(["python -m bench.engine_start", f"--runs {args.runs}",
                            *(["--real-size"] if args.real_size else []), f"--out {args.out}"])
        from bench.common import machine

        box = machine()
        where = f"{box['cpu']}, {box['cores']} cores, {box['memory_gib']} GiB, load {box['load_average'][0]}"
        write_section(args.out, f"`{command}` ({time.strftime('%Y-%m-%d')}, {where})\n\n{text}\n\n{result}",
                      REAL_SECTION if args.real_size else SECTION)


if __name__ == "__main__":
    main()
