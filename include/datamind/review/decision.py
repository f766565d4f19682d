"""What a release's review task says once a person has answered it: which way, who, when and why.

Airflow's Required actions panel shows the text the review task was created with (asking for a decision) and,
after the answer, only "Response received at ... from <user>" and the chosen button in a colour. This line goes
above that text, so the panel reads the decision in words, as the release's report and page do."""

from __future__ import annotations

from collections.abc import Mapping

from datamind.stages import PIPELINE

# The DAG a promoted release's dataset event wakes.
TRAINER = next(s.dag_id for s in PIPELINE if s.reads == "dataset")


def after_promotion(trainer_paused: bool | None) -> str:
    """What a promotion sets going, as true as what is known of the trainer DAG (None: its state is unknown).
    Airflow queues an Asset event only for DAGs unpaused when it is emitted: a paused trainer never starts on
    that release, not even once it is unpaused."""
    if trainer_paused is None:
        return (
            f"The release is promoted: its dataset event starts {TRAINER} if that DAG is unpaused (a paused "
            f"{TRAINER} does not start on it, not even once unpaused; trigger it by hand then)."
        )
    if trainer_paused:
        return (
            f"The release is promoted, but {TRAINER} is paused: its dataset event starts no run of it, not even "
            f"once unpaused. Unpause {TRAINER} and trigger it by hand to train on this release."
        )
    return f"The release is promoted: its dataset event starts {TRAINER} (unpaused) on it."


def decision_note(detail: Mapping, approve: str, trainer_paused: bool | None = None) -> str | None:
    """Markdown heading the review's text once it is answered (``detail``: Airflow's HITL detail as its API
    returns it; ``approve``: the option that promotes; ``trainer_paused``: whether ``TRAINER`` is paused, None
    when unknown); None while nobody has answered."""
    if not detail.get("response_received"):
        return None
    chosen = list(detail.get("chosen_options") or [])
    user = detail.get("responded_by_user") or {}
    who = user.get("name") or user.get("id") or "unknown"
    comment = ((detail.get("params_input") or {}).get("comment") or "").strip()
    approved = chosen == [approve]
    said = "approved" if approved else "rejected"
    after = after_promotion(trainer_paused) if approved else "The release stays readable and is never trained on."
    why = f' Comment: "{_md(comment)}".' if comment else " No comment."
    return f"**Decided: {said}** by {_md(who)} at {detail.get('responded_at')}.{why} {after}"


def _md(text: str) -> str:
    """A value inside the Markdown line: no markup of its own (the panel renders Markdown)."""
    return "".join("\\" + c if c in "\\`*_[]()<>#!|~" else c for c in " ".join(str(text).split()))
