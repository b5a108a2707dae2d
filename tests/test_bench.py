"""The benchmark is not part of the test suite; this checks that its quick mode runs and writes its table."""

from __future__ import annotations

import pytest

import json
import re
import subprocess
import sys

from .conftest import ROOT

pytestmark = [pytest.mark.engine, pytest.mark.server]


def test_quick_benchmark_runs_and_writes_its_table(tmp_path, report):
    # every path, at 32 tokens an answer (the quick run's 256 took a minute more of the suite's time)
    out = subprocess.run([sys.executable, "bench/run.py", "--quick", "--max-tokens", "32", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"RESULT app_vs_raw=[\d.]+ app_vs_serve=[\d.]+ ttft_app_minus_raw_ms=-?\d+ "
                        r"app_cpu_per_token_vs_serve=[\d.]+ turn2_ttft_vs_raw=[\d.]+ inspector_overhead_pct=-?[\d.]+ "
                        r"switch_rss_ratio=[\d.]+", line), line
    report(f"bench --quick: {line}")
    table = (tmp_path / "benchmark.md").read_text()
    assert "## Ratios at 8 streams" in table and "| tiny-qwen2.5-vl |" in table
    for path in ("raw AsyncLLM", "app: chat service", "app: Gradio API", "app: page protocol", "vllm serve (OpenAI server)",
                 "transformers generate"):
        assert f"| {path} | 8 |" in table, path
    data = json.loads((tmp_path / "benchmark.json").read_text())
    assert data["headline"]["app_cpu_per_token_vs_serve"] > 0  # measured: the app's and vllm serve's CPU per token
    # the leak check's baseline: the engines kept warm after one round trip (two, not one: the switch is to a warm one)
    assert data["switching"]["rss_warm_bytes"] > data["switching"]["rss_one_engine_bytes"]
    assert data["headline"]["switch_rss_ratio"] < 1.2, data["switching"]
    assert {r["path"] for r in data["results"]} == {"raw", "service", "gradio", "browser", "serve", "transformers"}
    assert all(r["tokens"] == r["requests"] * 32 for r in data["results"]), "every answer has max_tokens tokens"
    # where the first-token time goes, turns 2-3 with their cached tokens, inspect without an engine
    (steps,) = data["first_token_steps"]
    assert set(steps["steps"]) == {"upload", "queue", "read the message", "render", "panels", "first text update",
                                   "delivery"} and all(v >= -0.01 for v in steps["steps"].values()), steps
    (talk,) = data["conversations"]
    for path in ("raw", "service"):
        for conv in talk[path]:
            assert [row["turn"] for row in conv] == [1, 2, 3]
            assert all(row["cached_tokens"] > 0 for row in conv[1:]), (path, conv)  # the prefix cache served
    (insp,) = data["inspector"]
    assert insp["renderer_inspect_s"] < insp["engine_inspect_s"], insp
    assert "## Turns 2 and 3" in table and "## Inspect without an engine" in table
    assert (tmp_path / "benchmark.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.browser
def test_the_document_benchmark_runs_and_writes_its_section(tmp_path, report):
    """``bench/documents.py`` on a 3-page document at 4 tokens a page: every measurement runs (rasterising, the
    inspector, the app and vllm serve page by page, Chromium), the two sides get the same requests (their prompt
    tokens equal), and its section goes into an existing ``benchmark.md`` without touching the rest, once however
    often it runs; ``bench/report.py`` keeps it when it rewrites the file."""
    from bench.documents import HEADING, write
    from bench.report import with_real_size

    table = tmp_path / "benchmark.md"
    table.write_text("# Benchmark\n\n## Findings\n\nkept\n")
    out = subprocess.run([sys.executable, "-m", "bench.documents", "--pages", "3", "--max-tokens", "4", "--out",
                          str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    line = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"RESULT doc_pages_per_s_vs_serve=[\d.]+ inspect_40_pages_s=[\d.]+ "
                        r"raster_ms_per_page_144=[\d.]+ longest_browser_task_ms=\d+", line), line
    report(f"bench.documents --pages 3 --max-tokens 4: {line}")
    data = json.loads((tmp_path / "benchmark-documents.json").read_text())
    assert [(r["dpi"], r["size"]) for r in data["rasterising"]] == [(72, [595, 842]), (144, [1190, 1684]),
                                                                     (200, [1653, 2339])]
    assert data["app"]["tokens"] == data["serve"]["tokens"] == 3 * 4  # ignore_eos on both sides
    assert data["app"]["prompt_tokens"] == data["serve"]["prompt_tokens"] > sum(data["inspect"]["tokens_per_page"])
    assert len(data["inspect"]["tokens_per_page"]) == 3 and data["browser"]["enter_to_done_s"] > 0
    text = table.read_text()
    assert text.startswith("# Benchmark\n\n## Findings\n\nkept\n\n" + HEADING + "\n"), text[:300]
    assert line in text and "| app: page protocol" in text and "| 144 dpi, 3 pages | 1190 x 1684 |" in text
    write(data, tmp_path)  # again: in place
    table.write_text(with_real_size(table.read_text(), "## At a real checkpoint's size\n\nreal\n"))
    write(data, tmp_path)
    again = table.read_text()
    assert again.count(HEADING) == 1 and again.index(HEADING) < again.index("## At a real") and "real\n" in again


def test_the_panels_benchmark_runs_and_writes_its_section(tmp_path):
    """``bench/panels_cost.py`` with one question a kind: its rows, Export closed costing less and sending less than
    open (a photo's PNG data URL alone is most of a megabyte), its section added to an existing ``benchmark.md``."""
    from bench.report import PANELS_HEADING

    (tmp_path / "benchmark.md").write_text("# Benchmark\n\n## Findings\n\nkept\n")
    out = subprocess.run([sys.executable, "-m", "bench.panels_cost", "--questions", "1", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    text = (tmp_path / "benchmark.md").read_text()
    assert text.startswith("# Benchmark\n\n## Findings\n\nkept\n\n" + PANELS_HEADING) and text.count(PANELS_HEADING) == 1
    photo = next(line for line in text.splitlines() if line.startswith("| one photo-like picture"))
    closed_ms, open_ms, _, closed_mb, open_mb = (float(v) for v in photo.strip("|").split("|")[1:])
    assert closed_ms < open_ms and closed_mb < 0.1 < open_mb, photo
