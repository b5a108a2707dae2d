"""Fetching what vLLM needs of a Hugging Face Hub repository, and no more.

``download`` lists the repository, picks the files vLLM loads (``needed_files``: config, tokenizer,
processor and chat template files, remote code, and one weight format) and fetches them with
``huggingface_hub.snapshot_download`` into Hugging Face's own cache, telling its bytes as they come (the page's
progress while an engine starts). Every failure becomes one line in an ``EngineStartError``.
"""

from __future__ import annotations

import glob
from collections.abc import Callable, Iterable
from typing import Any

from .errors import EngineStartError
from .settings import Settings

METADATA_SUFFIXES = (".json", ".jinja", ".model", ".tiktoken", ".py")
"""Top-level files of these kinds are always fetched: configs, tokenizer / processor files (JSON,
SentencePiece ``.model``, tiktoken), chat templates and a ``trust_remote_code`` model's Python code."""

METADATA_NAMES = frozenset({"merges.txt", "vocab.txt"})
"""Other top-level tokenizer files that are always fetched."""

NOT_WEIGHTS = frozenset({"training_args.bin", "optimizer.bin", "scheduler.bin", "scaler.bin"})
"""``.bin`` files of a training run, not model weights (vLLM skips them too)."""


def needed_files(files: Iterable[str], weights: bool = True) -> list[str]:
    """The files of a repository (paths as the Hub lists them) that vLLM needs, in the given order.

    Only the top level counts: ``original/`` and other folders hold other formats of the same model, and
    ``additional_chat_templates/`` holds named extra templates (tool use, ...) that turn the processor's
    chat template into a dict, which vLLM 0.32's renderer cannot use ("unhashable type: 'dict'"). Of the
    weights, one format: Hugging Face safetensors (with their index), else Mistral's
    ``consolidated*.safetensors``, else PyTorch ``*.bin`` (with their index); never ``.pth``, ``.gguf``,
    ``.onnx``, ``.msgpack``, ``.h5`` and the like. ``weights=False``: the other files only (a renderer's).
    """
    files = list(files)
    top = [f for f in files if "/" not in f]
    hf_safetensors = [f for f in top if f.endswith(".safetensors") and not f.startswith("consolidated")]
    consolidated = [f for f in top if f.endswith(".safetensors") and f.startswith("consolidated")]
    bins = [f for f in top if f.endswith(".bin") and f not in NOT_WEIGHTS]
    if hf_safetensors or consolidated:
        weight_files, other_index = hf_safetensors or consolidated, ".bin.index.json"
    else:
        weight_files, other_index = bins, ".safetensors.index.json"
    chosen = set(weight_files if weights else ())
    for f in top:
        if (f.endswith(METADATA_SUFFIXES) or f in METADATA_NAMES) and not f.endswith(other_index):
            chosen.add(f)
    return [f for f in files if f in chosen]


def download(repo: str, revision: str | None, settings: Settings,
             on_bytes: Callable[[int, int], None] | None = None, weights: bool = True) -> str:
    """Fetch what vLLM needs of ``repo`` at ``revision`` (the default branch when None) into the Hugging
    Face cache and return the snapshot directory. Files fetched earlier are kept, so a second try after a
    failure fetches only what is still missing (huggingface_hub 2.4 drops a half-fetched file); a
    connection cut mid-file is resumed (an HTTP Range request) a few times within the same call before it
    counts as failed. ``on_bytes(done, total)`` hears the download's bytes as they are written (the page's
    progress; called from huggingface_hub's worker threads). ``weights=False``: all but the weights (what vLLM's
    renderer needs)."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        files = [s.rfilename for s in HfApi().model_info(repo, revision=revision, timeout=settings.hub_timeout_s)
                 .siblings or ()]
    except Exception as exc:  # noqa: BLE001 - offline: the cached listing, if this repo was fetched before
        files = _cached_files(repo, revision)
        if files is None:
            raise _one_line(repo, revision, exc) from None
    patterns = [glob.escape(f) for f in needed_files(files, weights)]
    bars, made = _byte_bars(on_bytes)
    try:
        return snapshot_download(repo, revision=revision, allow_patterns=patterns,
                                 etag_timeout=settings.hub_timeout_s, tqdm_class=bars)
    except Exception as exc:  # noqa: BLE001 - each kind becomes one line below
        raise _one_line(repo, revision, exc) from None
    finally:
        for bar in made:  # snapshot_download leaves its byte bars open
            bar.close()


BYTES_BAR = "huggingface_hub.snapshot_download"
"""The name snapshot_download gives its bar of bytes written (of all files being fetched)."""


def _byte_bars(on_bytes: Callable[[int, int], None] | None) -> tuple[type, list[Any]]:
    """A tqdm class for ``snapshot_download``'s bars, and the list of the bars it makes. Of the three it makes
    (bytes received, bytes written, files done), the bytes-written bar's count and growing total go to
    ``on_bytes``; all still show in a terminal."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    made: list[Any] = []

    class Bars(hf_tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any):
            self._bytes = kwargs.get("name") == BYTES_BAR
            self._done = 0  # counted here: a disabled bar (no terminal) keeps no count of its own
            super().__init__(*args, **kwargs)
            made.append(self)

        def update(self, n: float | None = 1) -> bool | None:
            self._done += int(n or 0)
            if self._bytes and on_bytes is not None:
                on_bytes(self._done, int(self.total or 0))
            return super().update(n)

    return Bars, made


def _cached_files(repo: str, revision: str | None) -> list[str] | None:
    """The repository's files as a previous download listed them (no network), or None."""
    from huggingface_hub import get_cached_repo_tree

    try:
        return [f.path for f in get_cached_repo_tree(repo, revision=revision)]
    except Exception:  # noqa: BLE001 - not fetched before (or an unreadable cache)
        return None


def _one_line(repo: str, revision: str | None, exc: BaseException) -> EngineStartError:
    """The download failure ``exc`` as one line saying what to do."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"could not download {repo}"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError) or (status == 403 and isinstance(exc, HfHubHTTPError)):
        text = (f"{where}: it is a gated repository and this machine has no access (HTTP {status}); accept its "
                "licence on its Hub page, then set HF_TOKEN to a token of that account")
    elif isinstance(exc, RevisionNotFoundError):
        text = f"{where}: it has no revision {revision!r}"
    elif isinstance(exc, RepositoryNotFoundError):
        text = f"{where}: no such repository on {constants.ENDPOINT}"
        if status == 401:
            text += " (or it is private: set HF_TOKEN to a token that can read it)"
    elif isinstance(exc, OfflineModeIsEnabled) or (constants.HF_HUB_OFFLINE and isinstance(exc, OSError)):
        text = f"{where}: HF_HUB_OFFLINE is set and the cache does not hold it"
    elif isinstance(exc, (httpx2.TransportError, ConnectionError, LocalEntryNotFoundError)):
        text = (f"{where}: the connection to {constants.ENDPOINT} failed or was cut ({type(exc).__name__}); "
                "files fetched so far are kept: try again to continue the download")
    elif isinstance(exc, HfHubHTTPError):
        text = f"{where}: the Hub answered HTTP {status}" + ("; try again later" if (status or 0) >= 500 else "")
    else:  # a full disk, an unwritable cache, ...
        text = f"{where}: {type(exc).__name__}: {_first_line(exc)}"
    return EngineStartError(text)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else "no details"


def reachable(timeout_s: float) -> bool:
    """Whether the Hub answers at all now (any HTTP answer counts; ``HF_HUB_OFFLINE``: no, without asking)."""
    import httpx
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    try:
        httpx.head(constants.ENDPOINT, timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return True


def _cached_needed(repo: str, revision: str | None) -> list[str] | None:
    """Paths in Hugging Face's cache of every file vLLM needs of ``repo`` (``needed_files``), or None where any is
    missing or the repository was never listed here."""
    from huggingface_hub import try_to_load_from_cache

    files = _cached_files(repo, revision)
    if not files:
        return None
    paths = []
    for name in needed_files(files):
        found = try_to_load_from_cache(repo, name, revision=revision)
        if not isinstance(found, str):
            return None
        paths.append(found)
    return paths


def is_cached(repo: str, revision: str | None) -> bool:
    """Whether every file vLLM needs of ``repo`` is in Hugging Face's cache already (its start downloads nothing)."""
    return _cached_needed(repo, revision) is not None


def cached_weights_bytes(repo: str, revision: str | None) -> int | None:
    """The size of ``repo``'s weight files in the cache, where all it needs is there; None otherwise."""
    import os

    paths = _cached_needed(repo, revision)
    if paths is None:
        return None
    weights = [p for p in paths if p.endswith((".safetensors", ".bin"))]
    return sum(os.path.getsize(p) for p in weights) or None
