"""What a release's review task says once a person has answered it: which way, who, when and why.

Airflow's Required actions panel shows the text the review task was created with (asking for a decision) and,
after the answer, only "Response received at ... from <user>" and the chosen button in a colour. This line goes
above that text, so the panel reads the decision in words, as the release's report and page do."""

from __future__ import annotations

from collections.abc import Mapping


def decision_note(detail: Mapping, approve: str) -> str | None:
    """Markdown heading the review's text once it is answered (``detail``: Airflow's HITL detail as its API
    returns it; ``approve``: the option that promotes); None while nobody has answered."""
    if not detail.get("response_received"):
        return None
    chosen = list(detail.get("chosen_options") or [])
    user = detail.get("responded_by_user") or {}
    who = user.get("name") or user.get("id") or "unknown"
    comment = ((detail.get("params_input") or {}).get("comment") or "").strip()
    approved = chosen == [approve]
    said = "approved" if approved else "rejected"
    after = (
        "The release is promoted: train_agent starts on it."
        if approved
        else "The release stays readable and is never trained on."
    )
    why = f' Comment: "{_md(comment)}".' if comment else " No comment."
    return f"**Decided: {said}** by {_md(who)} at {detail.get('responded_at')}.{why} {after}"


def _md(text: str) -> str:
    """A value inside the Markdown line: no markup of its own (the panel renders Markdown)."""
    return "".join("\\" + c if c in "\\`*_[]()<>#!|~" else c for c in " ".join(str(text).split()))
