"""The one Jinja environment behind every HTML page the project writes or serves: quality reports, their index
and the sample viewer, on disk and in the Airflow UI alike.

Pages show what workers and models wrote (questions, code, answers, run ids, file names), so every value is
escaped by the environment (``autoescape=True``) and markup lives in template files, never in Python strings.
The only HTML that reaches a page without escaping is Pygments' highlighting, which escapes the code it is given.

Styles are inline (a report is one file that opens offline) but never written by a value: each stylesheet is a
fixed text, one ``<style>`` element each, so a Content-Security-Policy can allow exactly these by their hashes
(``style_hashes``) and no other inline style.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, PrefixLoader, StrictUndefined
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, SqlLexer

_PACKAGE = Path(__file__).resolve().parent
# "quality/report.html.j2", "review/sample.html.j2": each package keeps its own templates beside its code
_TEMPLATE_DIRS = {name: _PACKAGE / name / "templates" for name in ("quality", "review")}
_CODE = HtmlFormatter(style="default")  # classes, not inline style attributes: those would need 'unsafe-inline'
_SQL_CALL = re.compile(r"execute_sql\(\s*(?:sql\s*=\s*)?(['\"]{1,3})(.*?)\1", re.DOTALL)


@cache
def stylesheets() -> dict[str, str]:
    """Every stylesheet a page may inline, by name: the ``.css`` files of the template folders and the code
    highlighting's colours."""
    sheets = {
        f"{prefix}/{css.name}": css.read_text(encoding="utf-8")
        for prefix, folder in _TEMPLATE_DIRS.items()
        for css in sorted(folder.glob("*.css"))
    }
    sheets["code.css"] = _CODE.get_style_defs(".highlight") + "\n"
    return sheets


def style_hashes() -> list[str]:
    """CSP source expressions ('sha256-...') for exactly the stylesheets ``stylesheets`` holds."""
    return [
        "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"
        for text in stylesheets().values()
    ]


def _stylesheet(name: str) -> Markup:
    return Markup(stylesheets()[name])  # a fixed file of ours, never data


def _python(code: str) -> Markup:
    return Markup(highlight(code, PythonLexer(), _CODE))  # Pygments escapes the code it highlights


def _sql_in(code: str) -> list[Markup]:
    """The SQL of each ``execute_sql(...)`` call in a cell, highlighted: the step's real content."""
    return [Markup(highlight(m.group(2).strip(), SqlLexer(), _CODE)) for m in _SQL_CALL.finditer(code)]


@cache
def environment() -> Environment:
    env = Environment(
        loader=PrefixLoader({name: FileSystemLoader(str(folder)) for name, folder in _TEMPLATE_DIRS.items()}),
        autoescape=True,
        undefined=StrictUndefined,  # a misspelt name fails the render instead of printing nothing
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=lambda value: "" if value is None else value,  # a missing value shows as nothing, not "None"
    )
    env.globals.update(stylesheet=_stylesheet, python=_python, sql_in=_sql_in)
    env.filters["clip"] = clip
    return env


def clip(value: Any, n: int = 140) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= n else text[: n - 1] + "…"


def render(template: str, /, **context: Any) -> str:
    return environment().get_template(template).render(**context)


def render_macro(template: str, macro: str, /, *args: Any) -> str:
    """One macro of a template on its own (a chart, the audit section), as a string of HTML."""
    return str(getattr(environment().get_template(template).module, macro)(*args))
