"""Downloads from the Hugging Face Hub (``vlm_demo.hub``), against a local server that speaks the Hub's
HTTP API (``tests/hub_server.py``): what is fetched, the one-line errors, resuming, progress bars, and
one registry entry with ``repo:`` rendered through vLLM's renderer."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import constants
from safetensors.numpy import save

from vlm_demo import hub
from vlm_demo.errors import EngineStartError
from vlm_demo.hub import needed_files
from vlm_demo.registry import parse_registry
from vlm_demo.service import ChatRequest, ChatService, Turn
from vlm_demo.tiny_models import tiny_model_dir

from .conftest import make_image
from .hub_server import HubServer, repo_from_dir

REPO = "tiny/qwen2.5-vl"
GATED = "tiny/gated-vl"
TOKEN = "hf_test_granted"
WEIGHTS = save({"w": np.arange(65536, dtype=np.float32)})  # 256 KiB of valid safetensors
NEEDED_EXTRA = {
    "model.safetensors": WEIGHTS,
    "generation_config.json": b'{"do_sample": false}',
}
DECOYS = {
    "pytorch_model.bin": b"\0" * 4096,  # the same weights in the other format
    "pytorch_model.bin.index.json": b'{"weight_map": {}}',
    "training_args.bin": b"\0" * 64,
    "original/consolidated.pth": b"\0" * 4096,
    "original/params.json": b"{}",
    "model.gguf": b"GGUF",
    "onnx/model.onnx": b"\0" * 64,
    "flax_model.msgpack": b"\0" * 64,
    "tf_model.h5": b"\0" * 64,
    "additional_chat_templates/tool_use.jinja": b"{{ messages }}",  # vLLM 0.32 cannot render with it
    "README.md": b"# tiny\n",
    ".gitattributes": b"*.safetensors filter=lfs\n",
}


@pytest.fixture(scope="module")
def tiny_dir(settings) -> Path:
    return tiny_model_dir("qwen2_5_vl", settings.cache_dir / "tiny-models")


@pytest.fixture
def server(tiny_dir, tmp_path, monkeypatch):
    """The local Hub, with huggingface_hub pointed at it and an empty cache of its own (no token)."""
    repos = {REPO: repo_from_dir(tiny_dir, {**NEEDED_EXTRA, **DECOYS}),
             GATED: repo_from_dir(tiny_dir, NEEDED_EXTRA, gated=True, tokens=frozenset({TOKEN}))}
    with HubServer(repos) as hub_server:
        # huggingface_hub reads these variables once, at import: set both the variables and its constants.
        monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
        monkeypatch.setattr(constants, "ENDPOINT", hub_server.url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            hub_server.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf" / "token"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
            monkeypatch.delenv(name, raising=False)
        yield hub_server


def expected_files(tiny_dir: Path) -> set[str]:
    return {p.name for p in tiny_dir.iterdir() if not p.name.startswith(".")} | set(NEEDED_EXTRA)


def snapshot_files(path: str) -> set[str]:
    root = Path(path)
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_needed_files_picks_one_weight_format():
    base = ["config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "tokenizer.model",
            "preprocessor_config.json", "merges.txt", "vocab.json", "modeling_x.py", "README.md", "LICENSE"]
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"]
    bins = ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json"]
    mistral = ["consolidated.safetensors", "params.json", "tekken.json"]
    others = ["original/consolidated.00.pth", "original/params.json", "model.gguf", "onnx/model.onnx",
              "flax_model.msgpack", "tf_model.h5", "training_args.bin", "optimizer.pt"]
    metadata = base[:-2]
    # safetensors beside .bin (and Mistral's consolidated copy): the HF safetensors and their index only
    assert set(needed_files(base + shards + bins + mistral + others)) == {*metadata, *shards, "params.json",
                                                                           "tekken.json"}
    # only .bin: those, with their index, never the training run's
    assert set(needed_files(base + bins + others)) == {*metadata, *bins}
    # only Mistral's format
    assert set(needed_files(base + mistral + others)) == {*metadata, *mistral}
    assert needed_files(["sub/config.json", "config.json", "additional_chat_templates/x.jinja"]) == ["config.json"]


def test_download_fetches_only_what_vllm_needs(server, tiny_dir, settings):
    path = hub.download(REPO, None, settings)
    assert Path(path).is_relative_to(constants.HF_HUB_CACHE)
    assert snapshot_files(path) == expected_files(tiny_dir)
    assert (Path(path) / "model.safetensors").read_bytes() == WEIGHTS
    assert not set(server.fetched(REPO)) & set(DECOYS)
    # a second call finds everything in the cache: no file is fetched again
    before = len(server.fetched(REPO))
    assert hub.download(REPO, "main", settings) == path
    assert len(server.fetched(REPO)) == before


async def test_a_remote_models_controls_come_from_its_hub_checkpoint_without_weights(server, tiny_dir, settings):
    """A server that serves a Hub id (its /v1/models root) whose family the app reads as generic: the app fetches
    that checkpoint's config, tokenizer, processor and template files, never its weights, and derives the
    model's controls with vLLM's renderer built from them."""

    from vlm_demo.engine import EngineManager
    from vlm_demo.engine.derive_controls import derive
    from vlm_demo.registry import ModelSpec

    path = hub.download(REPO, None, settings, weights=False)
    assert snapshot_files(path) == expected_files(tiny_dir) - {"model.safetensors"}
    assert "model.safetensors" not in server.fetched(REPO)
    spec = ModelSpec(name="remote-generic", label="r", family="generic", endpoint="http://127.0.0.1:9",
                     served_model_name="m")
    reference = EngineManager(settings).reference_renderer(spec, REPO, 4096)
    assert {"size.longest_edge", "size.shortest_edge"} <= {c.kwarg for c in (await derive(reference)).controls}


def test_unknown_repository_is_one_line(server, settings):
    with pytest.raises(EngineStartError) as err:
        hub.download("nobody/no-such-model", None, settings)
    message = str(err.value)
    assert "\n" not in message and "nobody/no-such-model" in message and "no such repository" in message


def test_unknown_revision_is_one_line(server, settings):
    with pytest.raises(EngineStartError, match=r"^could not download tiny/qwen2.5-vl: it has no revision 'v9'$"):
        hub.download(REPO, "v9", settings)


def test_gated_repository_says_to_set_hf_token(server, tiny_dir, settings, monkeypatch):
    with pytest.raises(EngineStartError) as err:
        hub.download(GATED, None, settings)
    message = str(err.value)
    assert "\n" not in message and GATED in message and "HF_TOKEN" in message and "licence" in message
    assert "401" in message
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # a token with access: the same call now succeeds
    assert snapshot_files(hub.download(GATED, None, settings)) == expected_files(tiny_dir)


def test_a_brief_cut_is_resumed_within_the_call(server, settings, monkeypatch):
    """A connection cut mid-file is resumed with a Range request from the bytes already written. (The
    library writes in chunks of constants.DOWNLOAD_CHUNK_SIZE, 10 MiB: smaller here, so a 256 KiB file
    has written chunks to resume from.)"""
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 16 * 1024)
    server.cut["model.safetensors"] = 100_000
    path = hub.download(REPO, None, settings)
    assert (Path(path) / "model.safetensors").read_bytes() == WEIGHTS
    ranges = [s.range for s in server.seen if s.method == "GET" and s.path.endswith("/model.safetensors")]
    assert ranges[0] is None and ranges[1] is not None and ranges[1].startswith("bytes=")
    assert 0 < int(ranges[1].removeprefix("bytes=").rstrip("-")) <= 100_000, ranges


def test_a_cut_that_lasts_is_one_line_and_a_second_try_completes(server, tiny_dir, settings):
    """The connection is cut mid-file and stays down (about 5 s: the library retries 5 times, 1 s apart):
    one line, and the files fetched so far are kept, so the second try fetches only the missing one."""
    server.cut["model.safetensors"] = 100_000
    server.outage.add("model.safetensors")
    with pytest.raises(EngineStartError) as err:
        hub.download(REPO, None, settings)
    message = str(err.value)
    assert "\n" not in message and REPO in message and "cut" in message and "try again" in message
    first = server.fetched(REPO)
    assert first.count("model.safetensors") == 6 and set(first) == expected_files(tiny_dir)
    server.outage.clear()
    path = hub.download(REPO, None, settings)
    assert server.fetched(REPO)[len(first):] == ["model.safetensors"]
    assert hashlib.sha256((Path(path) / "model.safetensors").read_bytes()).digest() == hashlib.sha256(WEIGHTS).digest()
    blobs = Path(constants.HF_HUB_CACHE) / "models--tiny--qwen2.5-vl" / "blobs"
    assert not list(blobs.glob("*.incomplete"))


def test_the_page_sees_download_progress(server, settings):
    """The download tells its bytes of their total as they are written (the page's status line while an engine
    starts), from huggingface_hub's worker threads, ending at the snapshot's size."""
    seen: list[tuple[int, int]] = []
    path = hub.download(REPO, None, settings, on_bytes=lambda done, total: seen.append((done, total)))
    size = sum(p.stat().st_size for p in Path(path).iterdir())
    assert len(seen) >= 2 and seen[-1] == (size, size), (seen[-3:], size)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


async def test_a_registry_entry_with_repo_downloads_then_renders(server, tiny_dir, settings, engines, tmp_path):
    """A ``repo:`` entry (random weights, like the tiny entries) is downloaded from the local Hub and
    rendered by vLLM's renderer (no engine process), which needs all its files but the weights."""
    text = f"""
models:
  - name: hub-qwen2.5-vl
    label: Qwen2.5-VL from the (local) Hub
    repo: {REPO}
    family: qwen2_5_vl
    engine_args: {{max_model_len: 4096, limit_mm_per_prompt: {{image: 2}}, load_format: dummy, enforce_eager: true}}
"""
    registry = parse_registry(text, tmp_path / "models.yaml")
    service = ChatService(registry, engines, settings)
    request = ChatRequest(model="hub-qwen2.5-vl",
                          turns=(Turn("user", "What is this?", {"image": (make_image(640, 480),)}),))
    inspection = await service.inspect(request, start_engine=False)
    assert inspection.budget.media_tokens["image"] == 391  # 17 x 23 cells of 28 px, as the real checkpoint
    assert "<|image_pad|>" in inspection.prompt
    assert set(server.fetched(REPO)) == expected_files(tiny_dir) - {"model.safetensors"}


def test_offline_the_cache_serves_what_was_fetched(server, tiny_dir, settings, monkeypatch):
    """With HF_HUB_OFFLINE (or the Hub out of reach), a repository fetched before comes from the cache;
    one never fetched is a one-line error."""
    path = hub.download(REPO, None, settings)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    before = len(server.seen)
    assert hub.download(REPO, None, settings) == path
    assert len(server.seen) == before
    with pytest.raises(EngineStartError, match=r"^could not download tiny/gated-vl: HF_HUB_OFFLINE is set and the "
                                               r"cache does not hold it$"):
        hub.download(GATED, None, settings)
