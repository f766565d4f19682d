"""Promotion: a release that passes its audit may be trained on at once; any other waits for a person, whose
decision (and name and comment) lands in the manifest and the card; training never takes a release that is
awaiting approval or rejected."""

from __future__ import annotations

import pytest
from review.release_builder import write_release

from datamind.publish import promotion
from datamind.storage import DataRoot
from datamind.tables import read_manifest, trainable_manifest


@pytest.fixture()
def root(tmp_path) -> DataRoot:
    return DataRoot(str(tmp_path / "data"))


def test_a_release_is_promoted_by_its_audit_or_waits_for_a_person(root):
    clean = write_release(root, 1, 40)
    flawed = write_release(root, 2, 120, flawed=True)
    assert clean["promotion"]["status"] == "promoted" and clean["promotion"]["by"] == "audit"
    waiting = flawed["promotion"]
    assert waiting["status"] == "awaiting_approval" and waiting["failing"] == ["repeated_word_question_share"]
    assert "repeated_word_question_share" in waiting["reason"]
    # a deployment asking for every release: a clean audit waits too
    assert promotion.initial(clean["audit"], approve_every=True)["status"] == "awaiting_approval"


def test_a_decision_is_recorded_once_in_the_manifest_and_the_card(root):
    write_release(root, 1, 120, flawed=True)
    decided = promotion.decide(root, 1, approved=True, user="ada", comment="doubled words are cosmetic here")
    p = decided["promotion"]
    assert (p["status"], p["decided_by"], p["comment"]) == ("promoted", "ada", "doubled words are cosmetic here")
    assert read_manifest(root, 1)["promotion"] == p
    card = root.read_text("dataset/v1/README.md")
    assert "decided by ada" in card and "promoted: may be trained on" in card and card.count("## Promotion") == 1
    again = promotion.decide(root, 1, approved=False, user="bob")  # a second click changes nothing
    assert again["promotion"] == p


def test_training_takes_the_newest_promoted_release_only(root):
    from datamind.train.exports import export

    write_release(root, 1, 60)
    write_release(root, 2, 120, flawed=True)
    assert trainable_manifest(root)["version"] == 1
    assert export(root).version == "v1"  # v2 waits for a person: never exported meanwhile
    promotion.decide(root, 2, approved=False, user="ada", comment="too many doubled words")
    write_release(root, 3, 120, flawed=True, seed=11)
    assert trainable_manifest(root)["version"] == 1  # rejected v2 and waiting v3 stay out
    promotion.decide(root, 3, approved=True, user="ada")
    assert trainable_manifest(root)["version"] == 3 and export(root).version == "v3"


def test_with_nothing_promoted_export_says_what_waits(root):
    from datamind.train.exports import export

    write_release(root, 1, 120, flawed=True)
    with pytest.raises(ValueError, match="v1 is awaiting_approval"):
        export(root)


def test_the_approvers_setting_names_airflow_users_and_refuses_an_entry_without_an_id(monkeypatch):
    from datamind.settings import APPROVERS_ENV, release_approvers

    monkeypatch.setenv(APPROVERS_ENV, " ada , 7=Bob Brown,, ada")
    # Airflow's HITL users: the id is what it compares with the answering user's id, the name what it shows
    assert release_approvers() == [{"id": "ada", "name": "ada"}, {"id": "7", "name": "Bob Brown"}]
    monkeypatch.setenv(APPROVERS_ENV, "  ")
    assert release_approvers() is None  # no list: anyone allowed to answer the DAG's required actions decides
    monkeypatch.delenv(APPROVERS_ENV)
    assert release_approvers() is None
    with pytest.raises(ValueError, match=f"{APPROVERS_ENV}: '=Ann' names no user id"):
        release_approvers("ada,=Ann")
    with pytest.raises(ValueError, match="two names"):
        release_approvers("7=Ann,7=Bob")
