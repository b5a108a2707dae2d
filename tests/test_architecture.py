"""The layers of docs/architecture.md, held against the code: what each package imports (at any depth of a module,
function-level imports included), and that the page reaches the engines only through the chat service (no
``engines`` attribute anywhere in ``ui/``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .conftest import ROOT

PACKAGE = ROOT / "vlm_demo"
LOWER = ("inspector", "intake", "registry", "families", "tiny_models", "profile", "grounding", "hub", "settings",
         "errors")
"""The layers below the service, which any layer above may import."""
FORBIDDEN = {
    "ui": {"engine", "cli", "serving"},
    "service": {"ui", "cli", "serving", "gradio"},
    "engine": {"service", "ui", "cli", "serving", "gradio"},
    "conversation": {"engine", "ui", "cli", "serving", "gradio"},  # (the one conversation, of the service's turns)
    "export": {"ui", "cli", "serving", "gradio"},  # (a request as OpenAI JSON: the engine layer's body, written once)
    **{lower: {"service", "ui", "cli", "serving", "gradio", "vllm"} for lower in LOWER},
}
"""Per layer (a package or a module of ``vlm_demo``), the layers and libraries it may not import."""
ALLOWED = {("inspector", "engine.types"), ("inspector", "engine.server_prompt"), ("inspector", "engine")}
"""What a lower layer takes from the engine layer: its value types (``RenderedPrompt``, a server's prompt)."""


def layer_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports, as ``vlm_demo``-relative names ("engine.types", "service") or top-level library
    names ("gradio", "vllm")."""
    tree = ast.parse(path.read_text())
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
                names = [module] if node.module else [f"{module}.{alias.name}" for alias in node.names]
            else:
                names = [node.module or ""]
        else:
            continue
        for name in names:
            found.add(name.removeprefix("vlm_demo.") if name.startswith("vlm_demo.") else name.split(".")[0])
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_no_import_runs_against_the_layers(path):
    layer = layer_of(path)
    forbidden = FORBIDDEN.get(layer, set())
    for name in imported(path):
        head = name.split(".")[0]
        if head in forbidden and (layer, name) not in ALLOWED:
            pytest.fail(f"{path.relative_to(ROOT)} imports {name}: the {layer} layer may not import {head} "
                        "(docs/architecture.md)")


def test_the_page_holds_no_engine_manager():
    """The page asks the chat service (engine states, starts, renderers); an ``engines`` attribute reached from ui/
    would reach past it, where the import graph cannot see."""
    for path in sorted((PACKAGE / "ui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "engines":
                pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} reaches .engines: ask the service instead")


def module_state(path: Path) -> list[str]:
    """The names ``path`` binds at module level to a mutable container (a dict, list or set: a process-wide store)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign) else [])
        value = getattr(node, "value", None)
        mutable = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in {"dict", "list", "set", "OrderedDict"})
        found += [t.id for t in targets if isinstance(t, ast.Name) and mutable]
    return found


def test_profiles_are_the_services_not_the_processs():
    """A model's profile is resolved once by the service and handed down (issue 45): profile.py keeps no process-wide
    store (a ``_known`` dict there was looked up by 38 calls in 16 files and written by the engine), and the engine
    layer keeps none of the service's (it returns the controls it derives; the service keeps them)."""
    assert module_state(PACKAGE / "profile.py") == []
    for path in sorted((PACKAGE / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in {"keep", "Profiles"}:
                pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} keeps a profile: return it to the service")
    assert "_SESSION_ENGINES" in module_state(Path(__file__).parent / "conftest.py")  # (the check sees a store)


def test_a_file_name_means_one_thing():
    """A module's name is its job's, once across the layers (issue 45: three audit.py, two grounding.py and
    controls.py, cost.py beside costs.py); a family's name names its adapter and its tiny model, the same family."""
    seen: dict[str, list[str]] = {}
    for path in MODULES:
        if path.name != "__init__.py":
            seen.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    families = {p.stem for p in (PACKAGE / "families").glob("*.py")}
    twice = {name: where for name, where in seen.items() if len(where) > 1
             and not (name in families and sorted(w.split("/")[0] for w in where) == ["families", "tiny_models"])}
    assert not twice, twice
    assert not [a for a in seen if a + "s" in seen], "a name beside its plural"


def test_the_rules_see_a_breach():
    """The checks above fail where they should: a page module importing the engine layer, a lower one gradio."""
    assert "engine" in imported(PACKAGE / "cli" / "commands.py") and "engine" in imported(PACKAGE / "inspector" / "core.py")
    assert {"engine", "gradio"} & FORBIDDEN["ui"] == {"engine"} and "gradio" in FORBIDDEN["intake"]
    assert "engine" in imported(PACKAGE / "serving.py")  # (function-level imports are seen)
