"""``docs/python-api.md`` is what ``sdk/python/tools/reference.py`` prints
from the installed package: it fails when a public name, signature or
docstring changed without regenerating the reference."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def load_tool():
    spec = importlib.util.spec_from_file_location("reference", ROOT / "sdk/python/tools/reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_current():
    tool = load_tool()
    committed = (ROOT / "docs/python-api.md").read_text()
    assert committed == tool.render(), f"docs/python-api.md is out of date; regenerate it with `{tool.REGENERATE}`"


def test_every_public_name_has_a_section():
    import agentcomputer

    text = load_tool().render()
    for name in agentcomputer.__all__:
        assert f"## `{name}`" in text, name
    assert "### `Computer.exec`" in text and "### `AsyncComputer.exec`" in text
