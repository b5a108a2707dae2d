"""Loading ``models.yaml``: the file -> a ``Registry`` of checked ``ModelSpec`` values; an unknown key or a bad value
raises ``RegistryError`` naming the file, the model and the key."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from ..errors import RegistryError, UnknownModelError
from .spec import ModelSpec

@dataclass(frozen=True)
class Registry:
    """All models of one ``models.yaml``, in file order."""

    path: Path
    """The file they came from."""
    models: tuple[ModelSpec, ...]
    """The entries."""

    def get(self, name: str) -> ModelSpec:
        """The model called ``name``, or ``UnknownModelError``."""
        for spec in self.models:
            if spec.name == name:
                return spec
        raise UnknownModelError(f"unknown model {name!r}; known: {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        """Model names in file order."""
        return [m.name for m in self.models]

    def default(self, has_gpu: bool) -> ModelSpec:
        """First real model with a GPU; first tiny model without one."""
        for spec in self.models:
            if spec.tiny != has_gpu:
                return spec
        return self.models[0]

    def with_model(self, spec: ModelSpec) -> Registry:
        """A copy with ``spec`` added (a local model directory given on the command line)."""
        return Registry(self.path, (*[m for m in self.models if m.name != spec.name], spec))


def where(loc: tuple[object, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(entry)"


def parse_registry(text: str, path: Path, check: Callable[[ModelSpec], None] | None = None) -> Registry:
    """Parse and validate the YAML text of a registry file; ``check`` (``ValueError``: bad) checks each entry
    beyond its own fields (``profile.check``: against its family adapter)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or set(data) != {"models"} or not isinstance(data["models"], list):
        raise RegistryError(f"{path}: expected one top-level key 'models' holding a list")
    models: list[ModelSpec] = []
    for index, entry in enumerate(data["models"]):
        name = entry.get("name", f"#{index + 1}") if isinstance(entry, dict) else f"#{index + 1}"
        if not isinstance(entry, dict):
            raise RegistryError(f"{path}: model {name}: expected a mapping")
        try:
            spec = ModelSpec(**entry)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = where(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "unexpected_keyword_argument":
                msg = "unknown key"
                if key in ("api_key", "key", "token", "password"):
                    msg = ("unknown key: never put a secret in this file; set api_key_env to the name of the "
                           "environment variable that holds the API key")
            raise RegistryError(f"{path}: model '{name}': key '{key}': {msg}") from None
        except TypeError as exc:  # e.g. a non-string key
            raise RegistryError(f"{path}: model '{name}': {exc}") from None
        if check is not None:
            try:
                check(spec)
            except ValueError as exc:
                raise RegistryError(f"{path}: model '{name}': {exc}") from None
        if spec.name in {m.name for m in models}:
            raise RegistryError(f"{path}: model '{name}': key 'name': duplicate name")
        if spec.path is not None and not Path(spec.path).is_absolute():
            spec = ModelSpec(**{**entry, "path": str((path.parent / spec.path).resolve())})
        models.append(spec)
    if not models:
        raise RegistryError(f"{path}: no models")
    return Registry(path, tuple(models))


def load_registry(path: Path, check: Callable[[ModelSpec], None] | None = None) -> Registry:
    """Read and validate ``path`` (``check``: as ``parse_registry`` takes it)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_registry(text, path, check)
