"""Prompt files (Jinja) of the rollout and judge stages, loaded by name with a content-derived version.

The version of a template is a hash of its text, so editing a prompt automatically changes every cache
key and every ``template_version`` column that depends on it; nobody has to remember to bump a number.
Prompts live in ``<repo>/prompts`` unless ``DATAMIND_PROMPTS_DIR`` points elsewhere.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import jinja2

from datamind.categories import CATEGORY_IDS
from datamind.ids import sha256_bytes
from datamind.settings import prompts_dir


@dataclass(frozen=True)
class Template:
    name: str
    text: str

    @property
    def version(self) -> str:
        return f"{Path(self.name).stem}@{sha256_bytes(self.text.encode('utf-8'))[:10]}"

    def render(self, **variables) -> str:
        return _compiled(self.text).render(**variables).strip()


_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


@functools.lru_cache(maxsize=128)
def _compiled(text: str) -> jinja2.Template:
    # Compiling costs ~14 ms a template, rendering well under one: every trajectory renders three.
    return _ENV.from_string(text)


@functools.lru_cache(maxsize=64)
def _read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def load(name: str) -> Template:
    path = prompts_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"prompt template {name!r} not found under {prompts_dir()}")
    return Template(name, _read(str(path)))


def workflow(category: str) -> Template:
    """The high-level procedure for one task category (``prompts/workflows/<category>.md``)."""
    if category not in CATEGORY_IDS:
        raise KeyError(f"unknown category {category!r}")
    return load(f"workflows/{category}.md")
