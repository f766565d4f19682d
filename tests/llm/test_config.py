"""LLMConfig from Airflow Connection fields and from the environment; the API key never shows."""

from __future__ import annotations

import json

import pytest

from datamind.llm import LLMConfig, Price

KEY = "sk-live-DO-NOT-PRINT-42"


def test_from_connection_dict_full_url_and_models_per_role():
    cfg = LLMConfig.from_connection_dict(
        {
            "host": "https://llm.example.internal/v1/",
            "login": "ignored",
            "password": KEY,
            "extra": json.dumps(
                {
                    "models": {"synthesizer": "big", "expert": "big", "judge": "small"},
                    "timeout_s": "45",
                    "max_concurrency": 32,
                    "params": {"expert": {"temperature": 0.7}},
                    "prices": {"big": {"prompt": 2.5, "completion": 10}},
                }
            ),
        }
    )
    assert cfg.base_url == "https://llm.example.internal/v1"
    assert cfg.api_key == KEY
    assert [cfg.model_for(r) for r in ("synthesizer", "expert", "judge")] == ["big", "big", "small"]
    assert cfg.timeout_s == 45.0 and cfg.max_concurrency == 32
    assert cfg.params_for("expert") == {"temperature": 0.7} and cfg.params_for("judge") == {}
    assert cfg.price_for("big") == Price(2.5, 10.0) and cfg.price_for("small") is None
    # 1000 prompt tokens at $2.5/M + 200 completion tokens at $10/M
    assert cfg.price_for("big").cost(1000, 200) == pytest.approx(0.0025 + 0.002)


def test_bare_host_is_completed_and_one_model_serves_all_roles():
    cfg = LLMConfig.from_connection_dict(
        {
            "host": "vllm",
            "schema": "http",
            "port": 8000,
            "password": None,
            "extra": {"model": "qwen", "models": {"judge": "j"}},
        }
    )
    assert cfg.base_url == "http://vllm:8000/v1"
    assert (cfg.model_for("synthesizer"), cfg.model_for("expert"), cfg.model_for("judge")) == ("qwen", "qwen", "j")
    assert cfg.api_key == ""


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"conn_type": "http", "host": "vllm", "port": 8000, "schema": "v1"}, "http://vllm:8000/v1"),  # from a URI
        ({"conn_type": "openai", "host": "gw.corp", "schema": "openai/v1"}, "https://gw.corp/openai/v1"),
        ({"conn_type": "generic", "host": "gw.corp", "schema": "https"}, "https://gw.corp/v1"),  # HttpHook style
        ({"host": "", "extra": {"base_url": "http://127.0.0.1:5/v1"}}, "http://127.0.0.1:5/v1"),
    ],
)
def test_base_url_from_split_airflow_fields(fields, expected):
    assert LLMConfig.from_connection_dict(fields).base_url == expected


def test_api_key_is_masked_everywhere():
    cfg = LLMConfig(base_url="http://127.0.0.1:1/v1", api_key=KEY, models={"judge": "m"})
    for shown in (repr(cfg), str(cfg), f"{cfg}", repr([cfg])):
        assert KEY not in shown
        assert "api_key=***" in shown


@pytest.mark.parametrize(
    ("conn", "match"),
    [
        ({"host": "", "extra": "{}"}, "no host"),
        ({"host": "http://h/v1", "extra": "{not json"}, "JSON object"),
        ({"host": "http://h/v1", "extra": "[1, 2]"}, "JSON object"),
        ({"host": "http://h/v1", "extra": {"models": {"critic": "m"}}}, "unknown LLM roles"),
        ({"host": "http://h/v1", "extra": {"timeout_s": "soon"}}, "timeout_s must be a number"),
        ({"host": "http://h/v1", "extra": {"prices": {"m": {"prompt": 1}}}}, "price for 'm'"),
        ({"host": "http://h/v1", "extra": {"max_concurrency": 0}}, "min_concurrency"),
    ],
)
def test_bad_connections_get_clear_errors(conn, match):
    with pytest.raises(ValueError, match=match):
        LLMConfig.from_connection_dict({**conn, "password": KEY})


def test_role_without_model_names_the_fix():
    cfg = LLMConfig.from_connection_dict({"host": "http://h/v1", "extra": {"models": {"judge": "j"}}}, conn_id="my_llm")
    with pytest.raises(ValueError, match=r"extra.models.expert on connection 'my_llm'"):
        cfg.model_for("expert")
    with pytest.raises(ValueError, match="unknown LLM role"):
        cfg.model_for("critic")


def test_from_env_prefers_airflow_connection_json():
    env = {
        "AIRFLOW_CONN_DATAMIND_LLM": json.dumps({"conn_type": "http", "host": "http://a:1/v1", "password": KEY,
                                                 "extra": {"model": "m"}}),
        "DATAMIND_LLM_BASE_URL": "http://b:2/v1",
    }  # fmt: skip
    cfg = LLMConfig.from_env(environ=env)
    assert cfg.base_url == "http://a:1/v1" and cfg.api_key == KEY and cfg.model_for("judge") == "m"


def test_from_env_datamind_variables():
    env = {
        "DATAMIND_LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "DATAMIND_LLM_API_KEY": KEY,
        "DATAMIND_LLM_MODEL": "all",
        "DATAMIND_LLM_MODEL_JUDGE": "judge-m",
        "DATAMIND_LLM_MAX_CONCURRENCY": "4",
        "DATAMIND_LLM_TIMEOUT_S": "9.5",
        "DATAMIND_LLM_PRICES": '{"all": {"prompt": 1, "completion": 2}}',
    }
    cfg = LLMConfig.from_env(environ=env)
    assert (cfg.model_for("expert"), cfg.model_for("judge")) == ("all", "judge-m")
    assert (cfg.max_concurrency, cfg.timeout_s) == (4, 9.5)
    assert cfg.price_for("all") == Price(1.0, 2.0)


def test_from_env_without_anything_says_what_to_set():
    with pytest.raises(ValueError, match="DATAMIND_LLM_BASE_URL"):
        LLMConfig.from_env(environ={})


def test_http_backend_is_validated_and_read_from_extra_and_env():
    assert (
        LLMConfig.from_connection_dict({"host": "http://h/v1", "extra": {"http_backend": "httpx"}}).http_backend
        == "httpx"
    )
    assert (
        LLMConfig.from_env(
            environ={"DATAMIND_LLM_BASE_URL": "http://h/v1", "DATAMIND_LLM_HTTP_BACKEND": "aiohttp"}
        ).http_backend
        == "aiohttp"
    )
    with pytest.raises(ValueError, match="http_backend must be one of"):
        LLMConfig.from_connection_dict({"host": "http://h/v1", "extra": {"http_backend": "curl"}})
