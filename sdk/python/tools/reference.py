"""Writes the Python library's reference, ``docs/python-api.md``, from the
installed package: every name of ``agentcomputer.__all__`` with its
signature and docstring, and the public methods and properties of each
class, in the order the source defines them.

    python sdk/python/tools/reference.py > docs/python-api.md

``sdk/python/tests/test_reference.py`` fails when the committed file
differs from what this prints.
"""

from __future__ import annotations

import inspect
import re
import sys

import agentcomputer

REGENERATE = "python sdk/python/tools/reference.py > docs/python-api.md"


def doc(obj) -> str:
    text = inspect.getdoc(obj) or ""
    return text.strip()


def signature(name: str, obj) -> str:
    """``name(params) -> ret`` with annotations as the source writes them
    (the package's modules use postponed annotations: strings)."""
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        sig = "(...)"
    sig = re.sub(r"(: |-> )'([^']*)'", r"\1\2", sig)
    if inspect.isclass(obj):
        sig = sig.removesuffix(" -> None")
    return f"{name}{sig}"


def members(cls):
    """Public methods and properties defined by ``cls`` itself."""
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in ("__enter__", "__exit__", "__aenter__", "__aexit__", "__iter__", "__aiter__"):
            continue
        if isinstance(value, property):
            yield name, "property", value.fget
        elif isinstance(value, (staticmethod, classmethod)):
            yield name, "method", value.__func__
        elif inspect.isfunction(value):
            yield name, "method", value


def render() -> str:
    out = [
        f"<!-- Generated from the package's docstrings by `{REGENERATE}`; do not edit by hand. -->",
        "",
        "# Python library reference (`agentcomputer`)",
        "",
        "Every public name of the package, with its signature and documentation.",
        "How to install and use it: [sdk/python/README.md](../sdk/python/README.md).",
        "",
        doc(agentcomputer).split("\n\n")[0],
    ]
    for name in agentcomputer.__all__:
        obj = getattr(agentcomputer, name)
        out.append("")
        if inspect.isclass(obj):
            kind = "exception" if issubclass(obj, BaseException) else "class"
            out += [f"## `{name}`", "", "```python", f"{kind} {signature(name, obj)}", "```", ""]
            if doc(obj):
                out += [doc(obj), ""]
            for mname, mkind, fn in members(obj):
                shown = f"{name}.{mname}"
                if mkind == "property":
                    out += [f"### `{shown}` (property)", ""]
                else:
                    out += [f"### `{shown}`", "", "```python", signature(mname, fn), "```", ""]
                if doc(fn):
                    out += [doc(fn), ""]
        elif inspect.isfunction(obj):
            out += [f"## `{name}`", "", "```python", signature(name, obj), "```", ""]
            if doc(obj):
                out += [doc(obj), ""]
        else:
            out += [f"## `{name}`", "", f"`{name} = {obj!r}`", ""]
    return "\n".join(line.rstrip() for line in out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
