"""Tiny offline models, built once into a cache folder by their family adapter's ``build_tiny``.

Each keeps its family's real image processing (sizes, patches, tiles, special tokens), so image
token counts equal the real checkpoints'; weights are random (vLLM's ``load_format="dummy"``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

_HERE = Path(__file__).parent


def _source_hash(family: str) -> str:
    """Hash of the adapter module and the shared helpers, so an edited builder builds into a fresh folder."""
    from ..families import get

    h = hashlib.sha256()
    module_file = Path(sys.modules[get(family).build_tiny.__module__].__file__ or "")
    for path in sorted({module_file, *_HERE.glob("*.py")}):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def tiny_model_dir(family: str, cache_dir: Path) -> Path:
    """Build the tiny ``family`` model under ``cache_dir`` once (atomically) and return its path."""
    from ..families import ADAPTERS

    adapter = ADAPTERS.get(family)
    if adapter is None or adapter.build_tiny is None:
        raise KeyError(f"no tiny model for family {family!r}; known: "
                       f"{', '.join(n for n, a in ADAPTERS.items() if a.build_tiny)}")
    dest = cache_dir / f"tiny-{family}-{_source_hash(family)}"
    if (dest / ".complete").exists():
        return dest
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".building-{dest.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    adapter.build_tiny(tmp)
    (tmp / ".complete").touch()
    try:
        os.rename(tmp, dest)
    except OSError:  # another process finished the same build first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
