"""Tiny offline models: one small builder per VLM family, built once into a cache folder.

Each keeps its family's real image processing (sizes, patches, tiles, special tokens), so image
token counts equal the real checkpoints'; weights are random (vLLM's ``load_format="dummy"``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from . import internvl, llava, ovis, qwen2_5_vl

#: Family name -> function that writes a tiny model of that family into an empty directory.
BUILDERS: dict[str, Callable[[Path], None]] = {
    "llava": llava.build,
    "qwen2_5_vl": qwen2_5_vl.build,
    "internvl": internvl.build,
    "ovis": ovis.build,
}

_HERE = Path(__file__).parent


def _source_hash(family: str) -> str:
    """Hash of the builder's code, so an edited builder builds into a fresh folder."""
    h = hashlib.sha256()
    module_file = Path(BUILDERS[family].__code__.co_filename)
    for path in sorted({module_file, *_HERE.glob("*.py"), *_HERE.glob("*.jinja")}):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def tiny_model_dir(family: str, cache_dir: Path) -> Path:
    """Build the tiny ``family`` model under ``cache_dir`` once (atomically) and return its path."""
    if family not in BUILDERS:
        raise KeyError(f"no tiny model for family {family!r}; known: {', '.join(BUILDERS)}")
    dest = cache_dir / f"tiny-{family}-{_source_hash(family)}"
    if (dest / ".complete").exists():
        return dest
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f".building-{dest.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    BUILDERS[family](tmp)
    (tmp / ".complete").touch()
    try:
        os.rename(tmp, dest)
    except OSError:  # another process finished the same build first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
