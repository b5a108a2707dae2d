"""``python -m tests.fast_serve ARGS``: ``python -m vllm.entrypoints.openai.api_server ARGS`` (what ``vllm serve``
runs), its engine processes forked instead of spawned: the API server forks its engine core once it has imported
vLLM, and the core forks its worker (``vlm_demo.engine.preload``), as vLLM does on GPUs. The server, its flags,
its rendering and its answers are vLLM's own; only the start skips two interpreters importing torch and vLLM
again (about 15 s of each of the tests' server starts on two cores). The benchmark's ``vllm serve`` and the
container start as vLLM starts them."""

from __future__ import annotations

import multiprocessing
import runpy
import sys

import vlm_demo.engine.preload  # noqa: F401 - torch and vLLM imported; the core forks its worker
import vllm.v1.engine.utils as engine_utils

if __name__ == "__main__":
    fork = multiprocessing.get_context("fork")
    engine_utils.get_mp_context = lambda: fork
    sys.argv[0] = "vllm.entrypoints.openai.api_server"
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=True)
