"""Prompt files: one workflow per category, templates render for every format, versions follow the text."""

from __future__ import annotations

import pytest

from datamind.agent import templates
from datamind.agent.tasks import QueryTask, build_prompts
from datamind.categories import CATEGORIES, CATEGORY_IDS
from datamind.judge.llm_judge import LLMJudge


def test_every_category_has_its_own_workflow_file():
    texts = {c: templates.workflow(c).text.strip() for c in CATEGORY_IDS}
    assert len(set(texts.values())) == 18  # no copy-pasted procedure
    assert all(t.count("\n") >= 2 for t in texts.values())
    with pytest.raises(KeyError):
        templates.workflow("astrology")


@pytest.mark.parametrize("fmt, name", [("csv", "sales.csv"), ("xlsx", "budget.xlsx"), ("sqlite", "shop.sqlite")])
@pytest.mark.parametrize("category", [c.id for c in CATEGORIES[::6]])
def test_system_prompt_renders_for_each_format(fmt, name, category):
    kwargs = {"sheet_name": "data"} if fmt == "xlsx" else {}
    task = QueryTask(
        {"query_id": "q", "category": category, "question": "How many rows?"}, [], f"/x/{name}", fmt, kwargs
    )
    p = build_prompts(task, max_turns=7)
    assert name in p.system and "at most 7 turns" in p.system
    # the workflow guides sampling (system_view) and never reaches the recorded, trained-on prompt
    workflow = templates.workflow(category).text.strip()
    assert workflow in p.system_view and workflow not in p.system and "How to approach" not in p.system
    assert p.system_view.startswith(p.system.split("## Working with")[0].rstrip())
    assert ("get_db_info()" in p.system) is (fmt == "sqlite")
    if fmt == "xlsx":
        # which sheet is asked about is part of the task; how ingestion read it only guides the expert
        assert "sheet 'data'" in p.user and "sheet_name='data'" in p.system_view
        assert "read it with" not in p.system
    assert "How many rows?" in p.user
    assert set(p.versions) == {"rollout_system", "rollout_user", "workflow"}


def test_template_version_changes_with_the_text():
    a = templates.Template("rollout/x.j2", "hello {{ name }}")
    b = templates.Template("rollout/x.j2", "hello, {{ name }}")
    assert a.version != b.version and a.version.startswith("x@")
    assert a.render(name="n") == "hello n"


def test_judge_prompt_lists_every_answer():
    judge = LLMJudge(client=None)
    text = judge.render("Which region?", ["North", "north", "South"])
    for i, a in enumerate(["North", "north", "South"], start=1):
        assert f"# Answer {i}\n{a}" in text
    assert "(1 to 3)" in text and "3%" in text
