"""Tiny offline models: which families have one, and each built once into a cache folder by its builder.

One module per family in this package (named as the family, with ``build(out)``) writes the model; this package
finds them by their file names, so knowing which families it builds imports no builder (and no transformers).
Each keeps its family's real image processing (sizes, patches, tiles, special tokens), so image token counts
equal the real checkpoints'; weights are random (vLLM's ``load_format="dummy"``).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import os
import pkgutil
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

_HERE = Path(__file__).parent
_SHARED = ("__init__", "common")

FAMILIES: frozenset[str] = frozenset(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _SHARED)
"""The families this package builds a tiny model of (its builder modules' names)."""


def builder(family: str) -> Callable[[Path], None]:
    """The function that writes ``family``'s tiny model into a folder; ``KeyError`` for a family with none."""
    if family not in FAMILIES:
        raise KeyError(f"no tiny model for family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    return importlib.import_module(f"{__name__}.{family}").build


def _origin(name: str) -> Path | None:
    """The file of module ``name`` (None: not a module of this project, or an attribute, not a module)."""
    try:
        spec = importlib.util.find_spec(name) if name.startswith("vlm_demo.") else None
    except ModuleNotFoundError:  # ``package.module.CONSTANT``
        return None
    return Path(spec.origin).resolve() if spec is not None and spec.origin else None


def _sources(module_name: str) -> list[Path]:
    """The builder module's file and those of the project modules it imports from (the family's facts)."""
    origin = _origin(module_name)
    assert origin is not None, module_name
    found = {origin, *((_HERE / f"{name}.py").resolve() for name in _SHARED)}
    package = module_name.rpartition(".")[0]
    for node in ast.walk(ast.parse(origin.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            found |= {path for name in [base, *(f"{base}.{a.name}" for a in node.names)] if (path := _origin(name))}
    return sorted(found)


_BUILDING = threading.Lock()


@functools.cache
def _source_hash(family: str) -> str:
    """Hash of the builder, the family facts it imports and the shared helpers, so an edited builder builds into
    a fresh folder (read once a process: the Export panel asks for the model's folder at every answer)."""
    h, root = hashlib.sha256(), _HERE.parent.resolve()
    for path in _sources(f"{__name__}.{family}"):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def tiny_model_dir(family: str, cache_dir: Path) -> Path:
    """Build the tiny ``family`` model under ``cache_dir`` once (atomically) and return its path."""
    build = builder(family)
    dest = cache_dir / f"tiny-{family}-{_source_hash(family)}"
    if (dest / ".complete").exists():
        return dest
    with _BUILDING:  # (one build at a time in a process: two requests' threads would share the folder below)
        if (dest / ".complete").exists():
            return dest
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = cache_dir / f".building-{dest.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        build(tmp)
        (tmp / ".complete").touch()
        try:
            os.rename(tmp, dest)
        except OSError:  # another process finished the same build first
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
