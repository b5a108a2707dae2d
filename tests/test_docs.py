"""The README is a front door (at most ``README_LINES`` lines, every page of docs/ one link away) and the docs say what
exists: every ``VLM_DEMO_*`` variable they name is a setting (or one of the few the scripts and tests read), every
setting is in docs/settings.md with its default, and every flag of a ``python -m vlm_demo`` or ``python app.py``
command they show is one that command takes."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex

from vlm_demo.cli import build_parser
from vlm_demo.settings import Settings

from .conftest import ROOT

README_LINES = 250
"""The README's length at most (issue 45: it was 1,016 lines)."""
DOCS = ROOT / "docs"
NOT_SETTINGS = {"VLM_DEMO_MODEL", "VLM_DEMO_INSTALL", "VLM_DEMO_CACHE", "VLM_DEMO_FORKSERVER", "VLM_DEMO_CHECK",
                "VLM_DEMO_JOURNEY_MODELS"}
"""Variables read outside ``Settings``: the start-up model (serving), the set-up script's (install mode, cache), the
engines' process start (forkserver), the tests' (the quick loop, the journeys' models)."""


def pages() -> dict[str, str]:
    """The README and every Markdown page of docs/, by path relative to the repository."""
    found = {"README.md": (ROOT / "README.md").read_text()}
    found |= {f"docs/{p.name}": p.read_text() for p in sorted(DOCS.glob("*.md"))}
    return found


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_LINES, len(readme.splitlines())
    linked = set(re.findall(r"\]\((docs/[^)#]+)\)", readme))
    for target in linked:
        assert (ROOT / target).exists(), target
    topical = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert topical <= linked, f"docs pages the README does not link: {sorted(topical - linked)}"


def test_links_between_pages_resolve():
    for name, text in pages().items():
        base = (ROOT / name).parent
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))  # (code shows links as code)
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", prose):
            assert (base / target).exists(), f"{name}: a link to {target}, which is not there"


def test_every_variable_named_is_a_setting_and_every_setting_is_documented():
    fields = {f"VLM_DEMO_{f.name.upper()}": f for f in dataclasses.fields(Settings)}
    for name, text in pages().items():
        for variable in set(re.findall(r"VLM_DEMO_[A-Z0-9_]+", text)):
            assert variable in fields or variable in NOT_SETTINGS, f"{name} names {variable}, which is no setting"
    table = (DOCS / "settings.md").read_text()
    rows = dict(re.findall(r"^\| `(VLM_DEMO_[A-Z0-9_]+)` \| ([^|]*) \|", table, flags=re.M))
    assert set(fields) <= set(rows), f"settings docs/settings.md leaves out: {sorted(set(fields) - set(rows))}"


def _flags(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Each command's flags (``serve`` is also ``python app.py``'s)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {s for action in p._actions for s in action.option_strings} for name, p in sub.choices.items()}


def test_every_command_shown_takes_the_flags_shown():
    flags = _flags(build_parser())
    shown = 0
    for name, text in pages().items():
        for block in re.findall(r"```(?:bash|sh|shell)?\n(.*?)```", text, flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split("#", 1)[0].strip().lstrip("$ ")
                found = re.search(r"(?:python|\.venv/bin/python) (?:-m vlm_demo (\w+)|app\.py)\b(.*)", line)
                if not found:
                    continue
                command = found[1] or "serve"
                assert command in flags, f"{name}: {line!r}: no command {command!r}"
                words = shlex.split(re.sub(r"\[[^\]]*\]", "", found[2]).replace("...", ""))  # (optional parts aside)
                for word in words:
                    flag = word.split("=", 1)[0]
                    if flag.startswith("--"):
                        assert flag in flags[command], f"{name}: {line!r}: {command} takes no {flag}"
                shown += 1
    assert shown >= 10, shown  # (the docs show the commands)
