"""Family adapters: one module per VLM family, discovered (nothing here lists them), plus the generic one.

``get(name)`` finds an adapter by its ``models.yaml`` key; ``for_model_type(model_type, architectures)`` the adapter
whose checkpoints have that config.json ``architectures`` or ``model_type``, else ``GENERIC``, which takes everything
from vLLM at run time.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from ..registry import AUTO
from .base import Adapter, Control, ItemGeometry, KnownCount, Task, no_geometry

__all__ = ["ADAPTERS", "AUTO", "GENERIC", "Adapter", "Control", "ItemGeometry", "KnownCount", "Task", "for_model_type",
           "get", "no_geometry"]

GENERIC = Adapter(name="generic", title="any vLLM model")
"""The adapter of models with none of their own: placeholders, feature tokens and ranges come from vLLM."""


def _discover() -> dict[str, Adapter]:
    found: dict[str, Adapter] = {}
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("_") or module.name == "base":
            continue
        adapter = getattr(importlib.import_module(f"{__name__}.{module.name}"), "ADAPTER", None)
        if isinstance(adapter, Adapter):
            if adapter.name in found or adapter.name in (AUTO, GENERIC.name):
                raise RuntimeError(f"family name {adapter.name!r} is used twice ({module.name})")
            found[adapter.name] = adapter
    return found


ADAPTERS: dict[str, Adapter] = _discover()
"""Every family adapter of this package, by name."""


def get(name: str) -> Adapter:
    """The adapter called ``name`` (``generic`` included); ``KeyError`` for an unknown name."""
    if name == GENERIC.name:
        return GENERIC
    return ADAPTERS[name]


def for_model_type(model_type: str, architectures: Iterable[str] = ()) -> Adapter:
    """The adapter whose checkpoints have one of these config.json ``architectures``, else the one whose have this
    ``model_type``, else ``GENERIC``."""
    named = set(architectures)
    return (next((a for a in ADAPTERS.values() if named & set(a.architectures)), None)
            or next((a for a in ADAPTERS.values() if model_type in a.model_types), GENERIC))
