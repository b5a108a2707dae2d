"""vLLM's renderers without an engine core, kept for the models whose engine does not run (the panels, Inspect only,
Compare and the command line's ``inspect`` render with one in seconds): built once however many ask at once, the most
recently used kept; and the spec of a server's reference checkpoint, whose renderer an audit holds its render to."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from .. import families
from ..errors import EngineStartError
from ..registry import EngineArgs, ModelSpec
from ..settings import RENDERERS_KEPT, Settings
from .renderer import Renderer


class RendererCache:
    """Renderers without an engine, by model, the most recently used last (``RENDERERS_KEPT`` at most)."""

    def __init__(self, build: Callable[[ModelSpec], Renderer]):
        self._build = build
        self._renderers: OrderedDict[str, Renderer] = OrderedDict()
        self._building: dict[str, asyncio.Future[Renderer]] = {}
        """Each model's renderer being built, which callers share (the panels and a question at once)."""

    async def get(self, spec: ModelSpec) -> Renderer:
        """``spec``'s renderer, built once (seconds: vLLM's config, tokenizer, processor) in a worker thread."""
        renderer = self._renderers.get(spec.name)
        if renderer is None or renderer.spec != spec:
            building = self._building.get(spec.name)
            if building is None:  # one build however many ask at once (the panels and a question)
                building = self._building[spec.name] = asyncio.ensure_future(asyncio.to_thread(self._build, spec))
                building.add_done_callback(lambda _: self._building.pop(spec.name, None))
            renderer = await asyncio.shield(building)
            self._renderers[spec.name] = renderer
        self._renderers.move_to_end(spec.name)
        while len(self._renderers) > RENDERERS_KEPT:
            self._renderers.popitem(last=False)
        return renderer


def reference_spec(spec: ModelSpec, root: str | None, settings: Settings, max_model_len: int | None = None,
                   trust_remote_code: bool = False) -> ModelSpec:
    """The entry of the checkpoint ``root`` a server of ``spec`` serves, for vLLM's renderer of it built here from its
    files (no engine, no weights): a directory on this machine, else a Hub id's config, tokenizer and processor files.
    ``trust_remote_code``: run the checkpoint's own code (the server runs it too). The entry's content format is the
    server's (its ``--chat-template-content-format``)."""
    from .. import hub

    if not root:
        raise EngineStartError(f"{spec.endpoint} does not say which checkpoint it serves (/v1/models root)")
    where = root if Path(root).is_dir() else hub.download(root, None, settings, weights=False)
    return ModelSpec(name=f"{spec.name}-reference", label=f"{root} (reference)", family=families.GENERIC.name,
                     path=where, engine_args=EngineArgs(
                         max_model_len=max_model_len or None, load_format="dummy",
                         limit_mm_per_prompt=dict(spec.engine_args.limit_mm_per_prompt),
                         trust_remote_code=trust_remote_code or spec.engine_args.trust_remote_code),
                     chat_template_content_format=spec.chat_template_content_format)
