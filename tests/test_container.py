"""The CPU image (the Dockerfile with ``RUNTIME=cpu``), built with podman as ``scripts/container.sh build`` builds it
on a machine like the CI's, and run as its README says: the page loads, its health check passes, one question with a
picture streams an answer through the page's API, the app runs as a user that is not root, ``podman stop`` (SIGTERM to
the app, as ``docker stop``) ends it within 5 s with status 0, and the container's log holds no traceback."""

from __future__ import annotations

import re
import time

import pytest

from .app_harness import MODEL, chat_args, connect, prompt_text, run
from .conftest import ARTIFACTS, ROOT, free_port, make_image
from .container import BUILD, IMAGE, podman

pytestmark = [pytest.mark.engine, pytest.mark.server]


START_TIMEOUT_S = 300.0
EXIT_LIMIT_S = 5.0
"""How long ``podman stop`` may take (issue 27: engines gone, exit within 5 s)."""


@pytest.fixture(scope="module")
def image() -> tuple[str, float, float]:
    """The image's tag, the seconds its build took and those this test waited for it (it builds from the session's
    start: ``tests/container.py``)."""
    rc, took, waited = BUILD.wait()
    assert rc == 0, BUILD.log.read_text()[-4000:]
    return IMAGE, took, waited


def _gone(name: str) -> str | None:
    """Why the container can no longer serve the page (None while it runs)."""
    state = podman("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
    return None if state == "running" else f"the container is {state}:\n{podman('logs', name).stderr[-3000:]}"


@pytest.mark.last
def test_the_cpu_image_serves_answers_and_stops_cleanly(image, registry, tmp_path, report):
    tag, build_s, waited_s = image
    name, port = f"vlm-demo-test-{free_port()}", free_port()
    t0 = time.perf_counter()
    podman("run", "-d", "--name", name, "--network", "host", "--shm-size", "1g", "-e", f"GRADIO_SERVER_PORT={port}",
           tag)
    try:
        client = connect(f"http://127.0.0.1:{port}/", time.monotonic() + START_TIMEOUT_S, lambda: _gone(name))
        page_s = time.perf_counter() - t0
        assert podman("healthcheck", "run", name, check=False).returncode == 0, "the image's health check failed"
        assert podman("exec", name, "id", "-un").stdout.strip() == "app"
        picture = tmp_path / "picture.png"
        make_image(640, 480).save(picture)
        out = run(client.submit(*chat_args(registry, picture, max_tokens=8), api_name="/chat"), client)
        assert out["stats_data"]["status"] == "done", out["stats_data"]
        assert out["stats_data"]["tokens"] >= 1, out["stats_data"]
        assert re.search(r"<\|vision_start\|>(<\|image_pad\|>×\d+)+<\|vision_end\|>", prompt_text(out)), prompt_text(out)
        answer_s = time.perf_counter() - t0
        t1 = time.monotonic()
        podman("stop", "--time", "30", name, timeout=60)
        stop_s = time.monotonic() - t1
        status = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        logs = podman("logs", name)
        log = logs.stdout + logs.stderr
    finally:
        (ARTIFACTS / "container-run.log").write_text(podman("logs", name, check=False).stderr)
        podman("rm", "--force", name, check=False)
    report(f"container: CPU image built in {build_s:.0f} s (in the background; this test waited {waited_s:.0f} s); page up {page_s:.0f} s after podman run, first answer ({MODEL}, a picture) at {answer_s:.0f} s, "
           f"podman stop took {stop_s:.1f} s")
    assert status == "0", f"exit status {status}\n{log[-3000:]}"
    assert stop_s < EXIT_LIMIT_S, log[-3000:]
    assert "Traceback" not in log and "leaked" not in log, log[-3000:]


def test_the_space_runs_the_gpu_image_of_the_pinned_release():
    """The README's front matter is a Docker Space on the image's port; the Dockerfile's default stack is vLLM's image
    of the release requirements.txt pins (no engine: the files only)."""
    front = (ROOT / "README.md").read_text().split("---\n")[1]
    fields = dict(line.split(": ", 1) for line in front.strip().splitlines())
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert fields["sdk"] == "docker" and "app_file" not in fields, fields
    assert f"EXPOSE {fields['app_port']}" in dockerfile and f"GRADIO_SERVER_PORT={fields['app_port']}" in dockerfile
    (pin,) = re.findall(r"^vllm==(\S+)", (ROOT / "requirements.txt").read_text(), re.M)
    assert "ARG RUNTIME=gpu\n" in dockerfile and f"ARG VLLM_IMAGE=vllm/vllm-openai:v{pin}\n" in dockerfile
