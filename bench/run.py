"""Benchmark: the app against the raw vLLM engine, vLLM's own OpenAI server and a transformers-generate demo.

    python bench/run.py [--quick] [--max-tokens N] [--out DIR]

Runs, in one go on this machine, with the tiny models (one picture per request, fixed ``max_tokens``,
``ignore_eos``): (a) the raw ``AsyncLLM`` at 1, 4 and 8 concurrent streams; (b) the same load through
the chat service and through the Gradio HTTP API (``gradio_client`` users in their own process, and
users that send every request Chromium sends for a question, in its order), with where the first-token time goes at
1 user; (c) transformers ``generate`` + ``TextIteratorStreamer``, one request at a time; (d) time to first
token with and without the inspection, and ``inspect`` with vLLM's renderer alone against starting the
engine; (e) model switching: time and resident memory; (f) the peer:
``vllm serve``'s OpenAI server with streaming clients in their own process; (g) three-turn conversations,
raw against the app. Writes ``benchmark.md``, ``benchmark.json`` and ``benchmark.png`` into ``--out``
(``docs/`` for a full run) and ends with one line:

    RESULT app_vs_raw=R1 app_vs_serve=R2 ttft_app_minus_raw_ms=T app_cpu_per_token_vs_serve=C turn2_ttft_vs_raw=R3
           inspector_overhead_pct=P switch_rss_ratio=R4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/run.py` from a fresh clone
    sys.path.insert(0, str(ROOT))

from bench.common import MODELS, Load, Result, machine, pct, write_pictures  # noqa: E402

PY = sys.executable


@dataclass(frozen=True)
class Plan:
    """What one run measures."""

    models: tuple[str, ...]
    loads: tuple[Load, ...]
    inspector_pairs: int
    hf_requests: int
    round_trips: int
    """Model switches there and back, after the load tests."""
    intervals: tuple[float, ...]
    """UI update intervals measured at 8 users through Gradio (first model); the first is the app's setting."""
    distinct: Load | None
    """A load with a different picture per request (engine-bound vision encoder), or None."""
    conversations: int
    """Three-turn conversations (two pictures in the first turn) per path and model."""


def plan(quick: bool, interval: float, tokens: int = 256) -> Plan:
    if quick:
        return Plan(models=("tiny-qwen2.5-vl",), loads=(Load(1, 2, tokens), Load(4, 1, tokens), Load(8, 1, tokens)),
                    inspector_pairs=8, hf_requests=2, round_trips=1, intervals=(interval,), distinct=None,
                    conversations=2)
    others = tuple(x for x in (0.05, 0.1, 0.25) if abs(x - interval) > 1e-9)
    return Plan(models=tuple(MODELS), loads=(Load(1, 6, tokens), Load(4, 4, tokens), Load(8, 4, tokens)),
                inspector_pairs=20, hf_requests=8, round_trips=3, intervals=(interval, *others),
                distinct=Load(8, 2, tokens), conversations=6)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_rss(pid: int) -> int:
    """Resident memory of a process and all its descendants, in bytes."""
    import psutil

    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


USERS = {"gradio": "bench.gradio_load", "browser": "bench.browser_load"}
"""The app's users by kind: the module that runs them."""


class AppServer:
    """``bench/app_server.py`` in a subprocess, driven over HTTP."""

    def __init__(self, model: str, interval: float, workdir: Path, root: Path = ROOT):
        """``root``: the checkout whose app is served (another commit's, to compare)."""
        self.port = free_port()
        self.interval = interval
        self.url = f"http://127.0.0.1:{self.port}/"
        self.env = {**os.environ, "GRADIO_TEMP_DIR": str(workdir / "gradio"), "GRADIO_ANALYTICS_ENABLED": "False"}
        self.log = open(workdir / f"app-server-{self.port}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [PY, "-m", "bench.app_server", "--port", str(self.port), "--model", model,
             "--ui-update-interval-s", str(interval)], cwd=root, env=self.env, stdout=self.log, stderr=self.log)
        import httpx

        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app server exited ({self.proc.returncode}); see {self.log.name}")
            try:
                if httpx.get(self.url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the app server did not answer within 180 s")
            time.sleep(0.5)
        from gradio_client import Client

        self.client = Client(self.url, verbose=False, download_files=False)

    def load_model(self, name: str) -> float:
        """Select ``name`` as a user does (the engine starts, the previous one stops); seconds taken."""
        t0 = time.perf_counter()
        self.client.predict(name, api_name="/load_model")
        return time.perf_counter() - t0

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds used so far by the app process and by its engine processes."""
        import psutil

        root = psutil.Process(self.proc.pid)
        engine = 0.0
        for proc in root.children(recursive=True):
            try:
                engine += sum(proc.cpu_times()[:2])
            except psutil.Error:
                pass
        return {"app": sum(root.cpu_times()[:2]), "engine": engine}

    def users(self, model: str, load: Load, picture: Path, kind: str = "gradio") -> dict:
        """One load of ``kind`` users: ``gradio`` (``bench.gradio_load``, gradio_client) or ``browser``
        (``bench.browser_load``: every request Chromium sends for a question, server-sent events read as they
        arrive)."""
        before = self.cpu_s()
        out = subprocess.run(
            [PY, "-m", USERS[kind], "--url", self.url, "--model", model, "--users", str(load.streams),
             "--per-user", str(load.per_stream), "--max-tokens", str(load.max_tokens), "--picture", str(picture)],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=900)
        if out.returncode:
            raise RuntimeError(f"{kind} users failed: {out.stderr[-2000:]}")
        data = json.loads(out.stdout.strip().splitlines()[-1])
        if data["errors"]:
            raise RuntimeError(f"{kind} users saw errors: {data['errors'][:3]}")
        after = self.cpu_s()
        data["interval_s"] = self.interval
        data["kind"] = kind
        data["app_cpu_per_token_s"] = (after["app"] - before["app"]) / max(data["tokens"], 1)
        data["cpu_per_request_s"] = {"app": (after["app"] - before["app"]) / data["requests"],
                                     "engine": (after["engine"] - before["engine"]) / data["requests"],
                                     "users": data["cpu_s"] / data["requests"]}
        return data

    def close(self) -> None:
        """Stop the server (SIGTERM: it stops its engine), then anything of it still running."""
        import psutil

        self.client.close()
        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        self.proc.terminate()
        try:
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        _, alive = psutil.wait_procs(family, timeout=30)
        for proc in alive:
            proc.kill()
        self.log.close()


class ServeServer:
    """vLLM's own OpenAI server (``python -m vllm.entrypoints.openai.api_server``, what ``vllm serve`` runs) for
    the model, with the engine arguments the app gives its engine, driven by ``bench/serve_load.py``."""

    def __init__(self, model: str, workdir: Path):
        import httpx

        from tests.vllm_server import PLAIN, launch
        from vlm_demo.engine import EngineManager
        from vlm_demo.engine.renderer import printable_only
        from vlm_demo.profile import load_registry
        from vlm_demo.settings import Settings

        settings = Settings.from_env()
        spec = load_registry(settings.models_file).get(model)
        engines = EngineManager(settings)
        self.allowed = workdir / f"allowed-{model}.json"  # the app's tiny models sample printable tokens only
        if printable_only(spec):
            self.allowed.write_text(json.dumps(list(engines.start_renderer(spec).printable_token_ids)))
        self.server = launch(spec, engines.model_path(spec), settings, workdir / f"serve-{model}.log", module=PLAIN)
        self.env = {**os.environ, "NO_PROXY": "*"}
        deadline = time.monotonic() + 300
        while True:
            if self.server.proc.poll() is not None:
                raise RuntimeError(f"vLLM's server exited ({self.server.proc.returncode}); see {self.server.log}")
            try:
                if httpx.get(self.server.url + "/v1/models", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("vLLM's server did not answer within 300 s")
            time.sleep(0.5)

    def users(self, model: str, load: Load, picture: Path) -> dict:
        argv = [PY, "-m", "bench.serve_load", "--url", self.server.url, "--model", model, "--users",
                str(load.streams), "--per-user", str(load.per_stream), "--max-tokens", str(load.max_tokens),
                "--picture", str(picture)]
        if self.allowed.exists():
            argv += ["--allowed-token-ids", str(self.allowed)]
        import psutil

        api_server = psutil.Process(self.server.proc.pid)  # (its engine core is a child process)
        before = sum(api_server.cpu_times()[:2])
        out = subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=900)
        cpu = sum(api_server.cpu_times()[:2]) - before
        if out.returncode:
            raise RuntimeError(f"vllm serve users failed: {out.stderr[-2000:]}")
        data = json.loads(out.stdout.strip().splitlines()[-1])
        if data["errors"]:
            raise RuntimeError(f"vllm serve users saw errors: {data['errors'][:3]}")
        data["api_server_cpu_per_token_s"] = cpu / max(data["tokens"], 1)
        return data

    def close(self) -> None:
        from tests.vllm_server import stop

        stop(self.server.proc)


SERVE_CPU: list[dict] = []
"""CPU seconds per streamed token of vllm serve's API server process, for each of its loads."""
CPU_LOG: list[dict] = []
"""CPU seconds per request of the app process, its engine and the users, for each Gradio load."""


def gradio_result(model: str, load: Load, data: dict, path: str = "gradio") -> Result:
    CPU_LOG.append({"model": model, "users_kind": path, "streams": load.streams, "interval_s": data.get("interval_s"),
                    **{k: round(v, 4) for k, v in data["cpu_per_request_s"].items()},
                    "slowest_call_s": round(data.get("slowest_call_s", 0.0), 3),
                    "app_per_token": round(data["app_cpu_per_token_s"], 7)})
    return Result(path, model, load.streams, data["requests"], data["tokens"], data["wall_s"], data["ttft_s"])


def serve_result(model: str, load: Load, data: dict) -> Result:
    """One vllm serve load's figures; its API server's CPU per token goes to ``SERVE_CPU``."""
    SERVE_CPU.append({"model": model, "streams": load.streams,
                      "api_server_per_token": round(data["api_server_cpu_per_token_s"], 7)})
    return Result("serve", model, load.streams, data["requests"], data["tokens"], data["wall_s"], data["ttft_s"])


def first_token_steps(model: str, data: dict) -> dict:
    """The p50 of each step to the first answer text over one load's answers (``bench.gradio_load.steps``)."""
    runs = data.get("steps") or []
    if not runs:
        return {}
    return {"model": model, "answers": len(runs),
            "steps": {name: pct([r[name] for r in runs], 50) for name in runs[0]}}


def inspect_cli_s(model: str, picture: Path) -> float:
    """Wall time of ``python -m vlm_demo inspect`` for one picture, process start to exit."""
    t0 = time.perf_counter()
    out = subprocess.run([PY, "-m", "vlm_demo", "inspect", "--model", model, "--image", str(picture), "--text",
                          "What is in the picture?", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(f"inspect failed: {out.stderr[-2000:]}")
    return wall


def hf_baseline(model: str, requests: int, max_tokens: int) -> dict:
    out = subprocess.run([PY, "-m", "bench.hf_baseline", "--model", model, "--requests", str(requests),
                          "--max-tokens", str(max_tokens), "--dtype", "float32"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(f"transformers baseline failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def hf_results(model: str, data: dict, streams: tuple[int, ...]) -> list[Result]:
    """The baseline serves one request at a time: ``n`` users arriving together wait for those before them.
    Aggregate tokens/s is the same at any number of users; user k's first token comes after the k answers
    before it (the measured answers, in order)."""
    runs = data["runs"]
    tokens = sum(r["tokens"] for r in runs)
    out = []
    for n in streams:
        ttfts, waited = [], 0.0
        for k in range(n):
            run = runs[k % len(runs)]
            ttfts.append(waited + run["ttft_s"])
            waited += run["total_s"]
        out.append(Result("transformers", model, n, len(runs), tokens, data["wall_s"], ttfts))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one model, few requests (about 5 minutes)")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per answer (ignore_eos; default 256; the "
                   "test suite's run: 32, every path at a fraction of the time)")
    p.add_argument("--out", type=Path, default=None, help="where the table, JSON and plot go (default: docs/, "
                   "or bench/results-quick/ with --quick)")
    args = p.parse_args(argv)
    out_dir = args.out or (ROOT / ("bench/results-quick" if args.quick else "docs"))
    from vlm_demo.settings import Settings

    interval = Settings.from_env().ui_update_interval_s
    run_plan = plan(args.quick, interval, args.max_tokens)
    started = time.perf_counter()
    info = {"machine": machine(), "mode": "quick" if args.quick else "full", "plan": asdict(run_plan),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    log(f"bench: {info['mode']} run on {info['machine']}")
    results: list[Result] = []
    inspector: list[dict] = []
    talks: list[dict] = []
    interval_runs: list[dict] = []
    switches: dict = {}
    hf_raw: list[dict] = []
    steps: list[dict] = []
    cli: dict[str, float] = {}

    # (a), (b) service, (d): raw engine and chat service in this process, one model at a time.
    for model in run_plan.models:
        log(f"[raw engine + chat service] {model}")
        res, insp, talk = asyncio.run(__import__("bench.engine_load", fromlist=["measure"]).measure(
            model, list(run_plan.loads), run_plan.inspector_pairs, run_plan.distinct, log=log,
            conversation_runs=run_plan.conversations))
        results += res
        inspector.append(insp)
        talks.append(talk)

    with tempfile.TemporaryDirectory(prefix="vlm-bench-") as tmp:
        work = Path(tmp)
        picture = write_pictures(work / "pictures", 1)[0]
        for model in run_plan.models:  # (d) the CLI's inspect, on a quiet machine
            cli[model] = inspect_cli_s(model, picture)
            log(f"[inspect CLI] {model}: {cli[model]:.1f} s")
        # (b) Gradio, (e) switching: one app server, models selected as a user selects them.
        log(f"[gradio api] app server, UI update interval {interval} s")
        server = AppServer(run_plan.models[0], interval, work)
        try:
            first = run_plan.models[0]
            other = next(m for m in MODELS if m != first)
            switches["first_start_s"] = server.load_model(first)
            switch_times = []
            for i, model in enumerate(run_plan.models):
                if i:
                    switch_times.append(server.load_model(model))
                server.users(model, Load(4, 1, 16), picture)  # warm-up
                for load in run_plan.loads:
                    d = server.users(model, load, picture)
                    if load.streams == 1 and first_token_steps(model, d):
                        steps.append(first_token_steps(model, d))
                        log("  first text at 1 user, p50 per step: " + ", ".join(
                            f"{k} {v * 1000:.0f} ms" for k, v in steps[-1]["steps"].items()))
                    r = gradio_result(model, load, d)
                    log(f"  {model} gradio   {load.streams} users:   {r.tokens_per_s:7.0f} tokens/s, "
                        f"TTFT p50 {pct(r.ttft_s, 50) * 1000:.0f} ms")
                    results.append(r)
                for load in run_plan.loads:  # the same load from users that read the stream as the page does
                    r = gradio_result(model, load, server.users(model, load, picture, "browser"), "browser")
                    log(f"  {model} browser  {load.streams} users:   {r.tokens_per_s:7.0f} tokens/s, "
                        f"TTFT p50 {pct(r.ttft_s, 50) * 1000:.0f} ms")
                    results.append(r)
                if i == 0:
                    time.sleep(1.0)
                    switches["rss_one_engine_bytes"] = tree_rss(server.proc.pid)
            current = run_plan.models[-1]
            targets = []
            for _ in range(run_plan.round_trips):
                targets += [other if current == first else first, first if current == first else other]
                current = targets[-1]
            if current != first:
                targets.append(first)
            for k, name in enumerate(targets):
                switch_times.append(server.load_model(name))
                log(f"  switched to {name} in {switch_times[-1]:.1f} s")
                if k == 1:  # a round trip: every engine the app keeps warm is up (the leak check's baseline)
                    time.sleep(1.0)
                    switches["rss_warm_bytes"] = tree_rss(server.proc.pid)
            server.users(first, Load(4, 1, 16), picture)
            time.sleep(1.0)
            switches.update(rss_after_bytes=tree_rss(server.proc.pid), switch_s=switch_times,
                            switches=len(switch_times), round_trips=run_plan.round_trips, model=first)
            log(f"  RSS {switches['rss_one_engine_bytes'] / 2**30:.2f} GiB with one engine, "
                f"{switches['rss_after_bytes'] / 2**30:.2f} GiB after {len(switch_times)} switches")
            eight = next(ld for ld in run_plan.loads if ld.streams == 8)
            interval_runs.append({"interval_s": interval, **gradio_result(first, eight, server.users(
                first, eight, picture)).summary()})
        finally:
            server.close()
        for other_interval in run_plan.intervals[1:]:
            log(f"[gradio api] UI update interval {other_interval} s, {first}, 8 users")
            server = AppServer(first, other_interval, work)
            try:
                server.load_model(first)
                server.users(first, Load(4, 1, 16), picture)
                interval_runs.append({"interval_s": other_interval, **gradio_result(first, eight, server.users(
                    first, eight, picture)).summary()})
                log(f"  {interval_runs[-1]['tokens_per_s']:.0f} tokens/s")
            finally:
                server.close()

        # (f) the peer: vLLM's own OpenAI server, its streaming clients in their own process.
        for model in run_plan.models:
            log(f"[vllm serve] {model}")
            peer = ServeServer(model, work)
            try:
                peer.users(model, Load(4, 1, 16), picture)  # warm-up
                for load in run_plan.loads:
                    r = serve_result(model, load, peer.users(model, load, picture))
                    log(f"  {model} vllm serve {load.streams} users: {r.tokens_per_s:7.0f} tokens/s, "
                        f"TTFT p50 {pct(r.ttft_s, 50) * 1000:.0f} ms")
                    results.append(r)
            finally:
                peer.close()

    # (c) transformers baseline, one request at a time.
    for model in run_plan.models:
        log(f"[transformers baseline] {model}")
        data = hf_baseline(model, run_plan.hf_requests, run_plan.loads[0].max_tokens)
        hf_raw.append(data)
        results += hf_results(model, data, tuple(ld.streams for ld in run_plan.loads))
        log(f"  {model} transformers: {results[-1].tokens_per_s:.0f} tokens/s (float32, {data['threads']} threads)")

    info["duration_s"] = round(time.perf_counter() - started, 1)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    data = {**info, "results": [r.summary() for r in results], "ttft_samples": {
        f"{r.path}/{r.model}/{r.streams}": r.ttft_s for r in results},
        "inspector": inspector, "conversations": talks, "intervals": interval_runs, "switching": switches, "transformers": hf_raw,
        "gradio_cpu_per_request_s": CPU_LOG, "serve_cpu": SERVE_CPU, "first_token_steps": steps,
        "inspect_cli_s": cli}
    from bench.report import headline, result_line, write_report

    data["headline"] = headline(data)
    write_report(data, out_dir)
    h = data["headline"]
    log(f"bench: wrote {out_dir}/benchmark.md, .json, .png in {info['duration_s']:.0f} s")
    print(result_line(h))
    return 0


if __name__ == "__main__":
    sys.exit(main())
