"""What two of Airflow's own screens say about this project's DAGs, worded for a person (a root middleware of
the api-server, registered by the reports plugin):

* a trigger whose form value a field's JSON schema refuses: Airflow answers with the jsonschema error, the
  field's whole schema included, and the trigger form shows it as it is; the answer becomes one sentence
  naming the field, what it takes and what it was given (``forms.explain_param_error``);
* the Required actions panel of a release's review, once answered: its text gains the decision in words at
  the top (``datamind.review.decision``), where Airflow otherwise shows only who answered and when, saying
  whether the trainer DAG starts on an approved release (it does not while paused; read from the metadata DB).

Only these two routes are read and rewritten, and only when the answer is the JSON Airflow wrote; anything else
passes through untouched, streamed as it came.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# the review task of publish_dataset and its promoting option (dags/publish_dataset.py: REVIEW, APPROVE)
REVIEWS = {("publish_dataset", "review"): "Approve"}

log = logging.getLogger(__name__)

_TRIGGER = re.compile(r"^/api/v2/dags/[^/]+/dagRuns$")
_HITL = re.compile(r"^/api/v2/dags/[^/]+/dagRuns/[^/]+/(?:taskInstances/[^/]+/-?\d+/)?hitlDetails(?:/tries/\d+)?$")


def _reworded_refusal(status: int, doc) -> bool:
    from datamind_airflow.forms import explain_param_error

    if status != 400 or not isinstance(doc, dict) or not isinstance(doc.get("detail"), str):
        return False
    sentence = explain_param_error(doc["detail"])
    if sentence is None:
        return False
    doc["detail"] = sentence
    return True


def trainer_paused() -> bool | None:
    """Whether the DAG a promoted release wakes is paused, from the metadata DB the api-server holds; None when
    it is unknown (not parsed yet, or the DB did not answer: the note then says it conditionally)."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from datamind.review.decision import TRAINER

    try:
        with create_session() as session:
            return session.scalar(select(DagModel.is_paused).where(DagModel.dag_id == TRAINER))
    except Exception:  # the panel's own answer must still come through: the note falls back to "if unpaused"
        log.exception("could not read whether %s is paused", TRAINER)
        return None


def _with_decisions(status: int, doc) -> bool:
    from datamind.review.decision import decision_note

    if status != 200 or not isinstance(doc, dict):
        return False
    details = doc.get("hitl_details") if isinstance(doc.get("hitl_details"), list) else [doc]
    changed = False
    paused: list[bool | None] = []  # read once, and only when an answered review is shown

    def trainer_state() -> bool | None:
        if not paused:
            paused.append(trainer_paused())
        return paused[0]

    for detail in details:
        ti = detail.get("task_instance") if isinstance(detail, dict) else None
        approve = REVIEWS.get((ti.get("dag_id"), ti.get("task_id"))) if isinstance(ti, dict) else None
        answered = approve and detail.get("response_received")
        note = decision_note(detail, approve, trainer_state()) if answered else None
        if note:
            detail["body"] = f"{note}\n\n---\n\n{detail.get('body') or ''}"
            changed = True
    return changed


class ApiWording:
    """The api-server's root middleware (module doc): buffers the answer of the two routes it words, passes
    every other request straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def _rewriter(self, scope: Scope) -> Callable[[int, object], bool] | None:
        if scope["type"] != "http":
            return None
        method, path = scope.get("method"), scope.get("path", "")
        if method == "POST" and _TRIGGER.match(path):
            return _reworded_refusal
        if method == "GET" and _HITL.match(path):
            return _with_decisions
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rewrite = self._rewriter(scope)
        if rewrite is None:
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def held(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            head, body = _reworded(start, b"".join(chunks), rewrite)
            await send(head)
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, held)


def _reworded(start: Message, body: bytes, rewrite) -> tuple[Message, bytes]:
    """The response's start and body, the body rewritten when it is JSON that ``rewrite`` changed."""
    headers = MutableHeaders(scope=start)
    if headers.get("content-encoding") or "json" not in headers.get("content-type", ""):
        return start, body
    try:
        doc = json.loads(body)
    except ValueError:
        return start, body
    if not rewrite(start["status"], doc):
        return start, body
    body = json.dumps(doc).encode()
    headers["content-length"] = str(len(body))
    return start, body
