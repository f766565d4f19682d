"""Stage parameters declared once: the form schema and the checks come from the same field declarations."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from datamind.stage_params import StageParams, check_ranges, form_schema, param


@dataclass(frozen=True)
class Knobs(StageParams):
    mode: str = param("fast", "Mode", enum=("fast", "slow"))
    n: int = param(3, "Count", minimum=1, maximum=8, section="Sizes")
    ratio: float = param(0.5, "Ratio", minimum=0, maximum=1)
    seed: int | None = param(None, "Seed")
    tags: tuple[str, ...] = param(("a",), "Tags", enum=("a", "b"))
    hidden: int = param(7, "Hidden", minimum=0, form=False)
    flag: bool = param(True, "Flag")
    workers: int = param(2, "Workers", minimum=1, fingerprint=False)
    FORM_ONLY = frozenset({"conn"})

    def __post_init__(self) -> None:
        check_ranges(self)


def test_form_schema_carries_types_ranges_choices_and_order():
    schema = form_schema(Knobs)
    assert list(schema) == ["mode", "n", "ratio", "seed", "tags", "flag", "workers"]  # in order; hidden is not
    assert schema["mode"] == {"default": "fast", "type": "string", "title": "Mode", "enum": ["fast", "slow"]}
    assert schema["n"] == {"default": 3, "type": "integer", "title": "Count", "minimum": 1, "maximum": 8,
                           "section": "Sizes"}  # fmt: skip
    assert schema["ratio"]["type"] == "number"
    assert schema["seed"]["type"] == ["null", "integer"] and schema["seed"]["default"] is None
    assert schema["tags"] == {"default": ["a"], "type": "array", "title": "Tags",
                              "items": {"type": "string", "enum": ["a", "b"]}}  # fmt: skip
    assert schema["flag"]["type"] == "boolean"
    assert form_schema(Knobs, defaults=Knobs(n=5))["n"]["default"] == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "warp"}, r"mode \(Mode\) must be one of \['fast', 'slow'\], got 'warp'"),
        ({"n": 0}, r"n \(Count\) must be between 1 and 8, got 0"),
        ({"n": 9}, r"n \(Count\) must be between 1 and 8, got 9"),
        ({"ratio": 1.5}, r"ratio \(Ratio\) must be between 0 and 1"),
        ({"tags": ("a", "z")}, r"tags \(Tags\) must be one of \['a', 'b'\], got 'z'"),
        ({"hidden": -1}, r"hidden \(Hidden\) must be >= 0, got -1"),
        ({"n": None}, r"n \(Count\) must be set"),
    ],
)
def test_out_of_range_values_name_the_field_and_the_range(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Knobs(**kwargs)


def test_valid_values_pass_and_unknown_keys_are_refused():
    assert Knobs(mode="slow", n=8, ratio=0, seed=None, tags=("a", "b")).n == 8
    assert Knobs.from_form({"n": 2, "conn": "x"}) == Knobs(n=2)  # conn: the orchestrator's, dropped
    with pytest.raises(ValueError, match=r"unknown Knobs parameter\(s\) \['nn'\]"):
        Knobs.from_form({"nn": 2})


def test_a_stage_function_takes_its_parameter_class_only():
    params = Knobs(n=2)
    assert Knobs.given(params) is params
    for other in ({"n": 2}, None, Source()):  # a form, nothing, another stage's parameters
        with pytest.raises(TypeError, match=r"expected Knobs, got \w+; build it with Knobs.from_form"):
            Knobs.given(other)


def test_the_fingerprint_covers_what_is_produced_not_how_it_is_scheduled():
    assert Knobs(workers=5).fingerprint == Knobs().fingerprint  # declared fingerprint=False
    assert Knobs(hidden=8).fingerprint != Knobs().fingerprint  # out of the form, still what is produced
    assert len({Knobs(n=n).fingerprint for n in range(1, 9)}) == 8
    assert "workers" not in Knobs.fingerprint_fields() and "hidden" in Knobs.fingerprint_fields()


def test_a_mutable_default_is_refused_at_declaration():
    with pytest.raises(TypeError, match="tuple"):
        param([1, 2], "List")


@dataclass(frozen=True)
class Source(StageParams):
    name: str = param("demo", "Source name", description="Recorded as the files' source.",
                      pattern="^[a-z0-9][a-z0-9_.-]*$")  # fmt: skip
    more: tuple[str, ...] = param((), "More URIs", min_length=1)
    needed: tuple[str, ...] = param(("a",), "Needed", min_items=1)

    def __post_init__(self) -> None:
        check_ranges(self)


def test_an_empty_optional_list_is_not_marked_required_and_null_reads_back_as_empty():
    """Issue 47: "More source URIs" is optional but the form marked it required (its type admitted no null)."""
    schema = form_schema(Source)
    assert schema["more"]["type"] == ["null", "array"] and schema["more"]["default"] == []
    assert schema["needed"]["type"] == "array"  # a list that needs an item stays required
    assert Source.from_form({"more": None}).more == ()


def test_a_patterned_field_says_its_allowed_characters_in_words_before_anyone_submits():
    description = form_schema(Source)["name"]["description"]
    assert description == (
        "Recorded as the files' source. Allowed characters: lowercase letters, digits, _ . - (no spaces, no "
        "capitals); it must start with one of: lowercase letters, digits."
    )


_FORM = {"shard_size": 2}  # a valid form for each stage below: only the type is wrong
STAGE_CALLS = {
    "plan_synthesis": ("datamind.synth.stage", lambda f, root: f(root, 2, _FORM)),
    "synthesize_shard": ("datamind.synth.stage", lambda f, root: f(root, {"shard_id": "s"}, _FORM, "r")),
    "summarize_run": ("datamind.synth.stage", lambda f, root: f(root, _FORM)),
    "plan_sampling": ("datamind.rollout.stage", lambda f, root: f(root, 2, _FORM)),
    "sample_shard": ("datamind.rollout.stage", lambda f, root: f(root, {"query_ids": []}, _FORM, "r")),
    "plan_judging": ("datamind.judge.stage", lambda f, root: f(root, 2, _FORM)),
    "judge_shard": ("datamind.judge.stage", lambda f, root: f(root, {"query_ids": []}, _FORM, "r")),
    "evaluate": ("datamind.evaluate.stage", lambda f, root: f(root, {"suites": {"heldout": ""}})),
    "publish_dataset": ("datamind.publish.stage", lambda f, root: f(root, "r", {"shard_rows": 2})),
    "publish": (
        "datamind.publish.release",
        lambda f, root: f(root, "r", {}, validate=None, report_url="", viewer_url=str),
    ),
}


@pytest.mark.parametrize("name", sorted(STAGE_CALLS))
def test_every_stage_function_refuses_a_form_it_would_have_to_convert(name, tmp_path):
    """The form becomes parameters once, at the DAG edge: a stage handed a dict says so instead of reading it."""
    import importlib

    module, call = STAGE_CALLS[name]
    with pytest.raises(TypeError, match=r"expected \w+Params, got dict; build it with \w+Params\.from_form"):
        call(getattr(importlib.import_module(module), name), str(tmp_path / "data"))
