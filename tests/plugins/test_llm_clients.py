"""Which tasks get an LLM client: every stage whose own backend is ``llm``, and the judge when only its judge is."""

from __future__ import annotations

import airflow  # noqa: F401  (puts the plugins folder on sys.path, as in a deployment)
import pytest

from datamind_airflow.llm import client_for


@pytest.mark.parametrize(
    "params, wanted",
    [
        ({"backend": "llm"}, True),
        ({"backend": "offline", "judge_backend": "llm"}, True),  # an LLM judge over offline trajectories
        ({"backend": "offline", "judge_backend": None}, False),
        ({"backend": "offline"}, False),
        ({}, False),
    ],
)
def test_a_task_gets_a_client_when_its_stage_or_its_judge_uses_the_llm(params, wanted, monkeypatch, airflow_db):
    monkeypatch.setenv("DATAMIND_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("DATAMIND_LLM_MODEL", "m")
    monkeypatch.delenv("AIRFLOW_CONN_DATAMIND_LLM", raising=False)
    with client_for(params) as client:
        assert (client is not None) == wanted
        if wanted:
            assert client.config.base_url == "http://127.0.0.1:9/v1" and client.config.model_for("judge") == "m"
