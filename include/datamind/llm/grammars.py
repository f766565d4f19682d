"""Grammars (GBNF) that constrain a reply to the format its parser reads, for endpoints that take one.

``prompts/grammars/<name>.gbnf`` is used as it is; ``<name>.gbnf.j2`` is rendered with the caller's values
(the target question type, the program language, the number of answers). Each file's first line carries a
``# version: X`` header like the prompt templates, so a changed grammar changes the request (and its cache
key) and never replays an answer made under the old one.
"""

from __future__ import annotations

import functools
import os
import re

import jinja2

from datamind.settings import prompts_dir

_VERSION = re.compile(r"#\s*version:\s*(\S+)")


def gbnf_string(value: str) -> str:
    """``value`` as a GBNF string literal."""
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


@functools.lru_cache(maxsize=8)
def _environment(root: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["gbnf_string"] = gbnf_string
    return env


@functools.lru_cache(maxsize=64)
def _plain(folder: str, name: str) -> str | None:
    """A grammar file used as it is, read once (every trajectory, question and verdict asks for one)."""
    path = os.path.join(folder, f"{name}.gbnf")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def grammar(name: str, **values) -> str:
    """The GBNF text of grammar ``name`` (FileNotFoundError when there is none)."""
    folder = str(prompts_dir() / "grammars")
    text = _plain(folder, name)
    if text is None:
        if not os.path.isfile(os.path.join(folder, f"{name}.gbnf.j2")):
            raise FileNotFoundError(f"no grammar {name!r} under {folder}")
        text = _environment(folder).get_template(f"{name}.gbnf.j2").render(**values)  # compiled once by Jinja
    if not _VERSION.match(text.split("\n", 1)[0]):
        raise ValueError(f"grammar {name!r} lacks a '# version: X' header on its first line")
    return text
