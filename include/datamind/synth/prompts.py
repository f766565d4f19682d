"""Prompt templates for query synthesis: Jinja2 files under ``prompts/`` plus per-category data files.

Every template starts with a ``{# version: X #}`` header; the version is stored with each item the
template produced, so a change to the wording is traceable in the output. Rendering uses
StrictUndefined: a missing variable is an error, never an empty string in a prompt.
Category files (``prompts/categories/<id>.yaml``) hold the definition, question templates and 4-6
few-shot exemplars for that category.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml

from datamind import categories
from datamind.settings import prompts_dir

_VERSION = re.compile(r"\{#\s*version:\s*([^\s#]+)\s*#\}")
META_KEYS = ("description", "head", "columns", "type", "range", "unique", "row_count", "column_count")
MAX_META_FIELD_CHARS = 4000
QUERY_TEMPLATE = "synthesis/query.j2"
COMPOSE_TEMPLATE = "synthesis/compose.j2"


class PromptError(ValueError):
    pass


@functools.lru_cache(maxsize=4)
def environment(root: str | None = None) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(root or str(prompts_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def template_version(name: str, root: str | None = None) -> str:
    env = environment(root)
    source, _, _ = env.loader.get_source(env, name)
    match = _VERSION.search(source.split("\n", 1)[0])
    if not match:
        raise PromptError(f"template {name} lacks a '{{# version: X #}}' header on its first line")
    return match.group(1)


@dataclass(frozen=True)
class CategorySpec:
    id: str
    name: str
    version: str
    definition: str
    question_templates: tuple[str, ...]
    exemplars: tuple[str, ...]


@functools.lru_cache(maxsize=64)
def category_spec(category_id: str, root: str | None = None) -> CategorySpec:
    cat = categories.get(category_id)
    path = Path(root or prompts_dir()) / "categories" / f"{category_id}.yaml"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PromptError(f"no category file {path}") from None
    except yaml.YAMLError as exc:
        raise PromptError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise PromptError(f"{path}: expected a mapping")
    missing = [k for k in ("id", "name", "version", "definition", "question_templates", "exemplars") if k not in raw]
    if missing:
        raise PromptError(f"{path}: missing keys {missing}")
    if raw["id"] != cat.id or raw["name"] != cat.name:
        raise PromptError(f"{path}: id/name {raw['id']!r}/{raw['name']!r} do not match {cat.id!r}/{cat.name!r}")
    exemplars = tuple(str(e).strip() for e in raw["exemplars"])
    if not 4 <= len(exemplars) <= 6:
        raise PromptError(f"{path}: needs 4-6 exemplars, has {len(exemplars)}")
    qts = tuple(str(t).strip() for t in raw["question_templates"])
    if not qts:
        raise PromptError(f"{path}: needs at least one question template")
    return CategorySpec(cat.id, cat.name, str(raw["version"]), str(raw["definition"]).strip(), qts, exemplars)


def all_category_specs(root: str | None = None) -> list[CategorySpec]:
    return [category_spec(c.id, root) for c in categories.CATEGORIES]


def _as_text(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > MAX_META_FIELD_CHARS:
        text = text[:MAX_META_FIELD_CHARS] + " ... (truncated)"
    return text


def meta_for_prompt(meta_info: str | dict | None) -> dict[str, str]:
    """catalog_tables.meta_info -> the strings the templates show; missing keys are an error."""
    if isinstance(meta_info, str):
        try:
            meta_info = json.loads(meta_info)
        except json.JSONDecodeError as exc:
            raise PromptError(f"meta_info is not valid JSON: {exc}") from exc
    if not isinstance(meta_info, dict):
        raise PromptError("meta_info is missing")
    missing = [k for k in META_KEYS if k not in meta_info]
    if missing:
        raise PromptError(f"meta_info lacks keys {missing}")
    return {k: _as_text(meta_info[k]) for k in META_KEYS}


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    version: str  # "<template>@<v>+<category>@<v>"


def render_query_prompt(
    meta: dict[str, str],
    category_id: str,
    template_index: int = 0,
    avoid: list[str] | tuple = (),
    root: str | None = None,
    data: dict[str, str] | None = None,
    rules: dict | None = None,
) -> RenderedPrompt:
    spec = category_spec(category_id, root)
    text = (
        environment(root)
        .get_template(QUERY_TEMPLATE)
        .render(
            meta=meta,
            categories=all_category_specs(root),
            target=spec,
            question_template=spec.question_templates[template_index % len(spec.question_templates)],
            exemplars=spec.exemplars,
            avoid=list(avoid),
            data=data,
            rules=rules,
        )
    )
    return RenderedPrompt(text, f"query@{template_version(QUERY_TEMPLATE, root)}+{spec.id}@{spec.version}")


def render_compose_prompt(
    meta: dict[str, str],
    category_id: str,
    previous_question: str,
    previous_result: str | None,
    hop: int,
    max_hops: int,
    root: str | None = None,
    data: dict[str, str] | None = None,
    rules: dict | None = None,
) -> RenderedPrompt:
    spec = category_spec(category_id, root)
    text = (
        environment(root)
        .get_template(COMPOSE_TEMPLATE)
        .render(
            meta=meta,
            target=spec,
            previous_question=previous_question,
            previous_result=previous_result,
            hop=hop,
            max_hops=max_hops,
            data=data,
            rules=rules,
        )
    )
    return RenderedPrompt(text, f"compose@{template_version(COMPOSE_TEMPLATE, root)}+{spec.id}@{spec.version}")


def program_context(source) -> dict[str, str]:
    """How the synthesizer's reference program reaches the data (``data`` of the synthesis prompts):
    Python programs start from the exact read code; SQL queries see the analysed relation."""
    lang = source.solution_lang_default
    if lang == "sql":
        return {"lang": "sql", "file_name": source.file_name, "relation_sql": source.relation_sql()}
    return {"lang": "python", "file_name": source.file_name, "read_code": source.python_preamble().strip()}
