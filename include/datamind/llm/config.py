"""Where the LLM lives and how hard we may push it: one record built from an Airflow Connection or the environment.

Connection layout (any OpenAI-compatible endpoint; conn_type can be anything, e.g. ``http`` or ``openai``):
    host      base URL, e.g. ``https://api.openai.com/v1`` or ``http://vllm:8000/v1``; a bare host name is
              completed from conn_type/schema/port (``{"conn_type": "http", "host": "vllm", "port": 8000}``
              -> ``http://vllm:8000/v1``), so the URI form ``http://:KEY@vllm:8000/v1`` works too
    password  API key (login is ignored)
    extra     JSON:
      {"models": {"synthesizer": "gpt-4o", "expert": "gpt-4o", "judge": "gpt-4o-mini"},   # or "model" for all
       "timeout_s": 120, "max_concurrency": 32, "max_retries": 4, "max_throttle_retries": 10,
       "breaker_threshold": 8, "breaker_cooldown_s": 30, "http_backend": "auto",
       "grammar": "llama.cpp",                                    # constrained decoding (see LLMConfig.grammar)
       "params": {"expert": {"temperature": 0.7}},                # default sampling parameters per role
       "prices": {"gpt-4o": {"prompt": 2.5, "completion": 10.0}}} # USD per million tokens

The DAG passes the connection's fields as a plain dict, so this module never imports Airflow:
    LLMConfig.from_connection_dict({"host": c.host, "password": c.password, "extra": c.extra,
                                    "schema": c.schema, "port": c.port})
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from datamind.stage_params import check_ranges, param

ROLES: tuple[str, ...] = ("synthesizer", "expert", "judge", "agent")  # agent: the model under evaluation
DEFAULT_CONN_ID = "datamind_llm"
HTTP_BACKENDS = ("auto", "httpx", "aiohttp")
GRAMMAR_FIELDS = {"": None, "llama.cpp": "grammar", "vllm": "guided_grammar"}  # dialect -> request body field


@dataclass(frozen=True)
class ConnectionForm:
    """The field every LLM stage's form adds: the Airflow Connection of its endpoint. Only the orchestrator reads
    it (the stage gets a client), so it is never part of a stage's parameters or fingerprint."""

    llm_conn_id: str = param(DEFAULT_CONN_ID, "LLM Connection", section="LLM")


REQUEST_MODES = ("online", "batch")


@dataclass(frozen=True)
class RequestForm:
    """How a stage whose answers can wait sends its requests (synthesis, judging): ``batch`` goes through the
    OpenAI Batch API (``datamind.llm.batch``).  Orchestration too: the same rows either way."""

    request_mode: str = param(
        "online", "Request mode", enum=REQUEST_MODES, section="LLM",
        description="batch: the endpoint's Batch API, about half the price; answers within its window (up to "
        "24 h) while the task waits on the triggerer without a worker slot.",
    )  # fmt: skip
    batch_poll_s: float = param(
        30.0, "Batch poll interval (s)", minimum=0.1, maximum=3600, section="LLM",
        description="The first wait between polls of a running batch; it grows 1.5x a poll, to 10 minutes.",
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_ranges(self)


# The form keys only the orchestrator reads: never a stage's parameter, never in a fingerprint.
CONNECTION_KEYS = frozenset(f.name for form in (ConnectionForm, RequestForm) for f in fields(form))


@dataclass(frozen=True)
class Price:
    """USD per million tokens; ``batch``: the share of that price a Batch API request costs (OpenAI: half)."""

    prompt: float
    completion: float
    batch: float = 0.5

    def cost(self, prompt_tokens: int, completion_tokens: int, *, batch: bool = False) -> float:
        online = (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1_000_000
        return online * self.batch if batch else online


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    api_key: str = field(default="", repr=False)
    models: Mapping[str, str] = field(default_factory=dict)  # role -> model name
    timeout_s: float = 120.0  # whole request, per attempt
    max_concurrency: int = 16  # ceiling of the adaptive limiter; it starts here and halves on 429
    min_concurrency: int = 1
    max_retries: int = 4  # per request, on timeouts, connection errors, 5xx and unusable bodies
    max_throttle_retries: int = 10  # per request, on 429 (the endpoint is alive, only busy)
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    breaker_threshold: int = 8  # consecutive transport failures (across all requests) that open the circuit
    breaker_cooldown_s: float = 30.0
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # role -> default sampling params
    prices: Mapping[str, Price] = field(default_factory=dict)  # model -> price
    # "auto": aiohttp under the openai client when installed (openai's own `aiohttp` extra: about half the
    # CPU per request of the default HTTPX2 transport), else HTTPX2.  "httpx" / "aiohttp" force one.
    http_backend: str = "auto"
    # Constrained decoding: how this endpoint takes a grammar that the reply must follow. "" (none: the reply is
    # parsed and re-asked as usual), "llama.cpp" (GBNF in the body's `grammar`), "vllm" (the same GBNF in
    # `guided_grammar`). Small models write the tag formats only under a grammar; large ones need none.
    grammar: str = ""
    conn_id: str = DEFAULT_CONN_ID  # only for error messages

    def __post_init__(self) -> None:
        if not self.base_url or "://" not in self.base_url:
            raise ValueError(f"LLM base_url must be a URL like http://host:port/v1, got {self.base_url!r}")
        unknown = set(self.models) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown LLM roles {sorted(unknown)}; roles are {list(ROLES)}")
        if self.max_concurrency < 1 or not 1 <= self.min_concurrency <= self.max_concurrency:
            raise ValueError("need 1 <= min_concurrency <= max_concurrency")
        if self.timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if self.http_backend not in HTTP_BACKENDS:
            raise ValueError(f"http_backend must be one of {list(HTTP_BACKENDS)}, got {self.http_backend!r}")
        if self.grammar not in GRAMMAR_FIELDS:
            raise ValueError(f"grammar must be one of {list(GRAMMAR_FIELDS)}, got {self.grammar!r}")

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={'***' if f.name == 'api_key' and self.api_key else repr(getattr(self, f.name))}"
            for f in fields(self)
        )
        return f"LLMConfig({shown})"

    __str__ = __repr__

    def model_for(self, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown LLM role {role!r}; roles are {list(ROLES)}")
        try:
            return self.models[role]
        except KeyError:
            raise ValueError(
                f"no model configured for role {role!r}: set extra.models.{role} on connection {self.conn_id!r}"
            ) from None

    def params_for(self, role: str) -> dict[str, Any]:
        return dict(self.params.get(role, {}))

    def price_for(self, model: str) -> Price | None:
        return self.prices.get(model)

    def with_overrides(self, **overrides: Any) -> LLMConfig:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_connection_dict(cls, conn: Mapping[str, Any], *, conn_id: str = DEFAULT_CONN_ID) -> LLMConfig:
        """From Airflow Connection fields (host, password, extra, optional schema/port/login)."""
        extra = _parse_extra(conn.get("extra"), conn_id)
        base_url = _base_url(
            conn.get("host") or extra.get("base_url") or "", conn.get("schema"), conn.get("port"), conn.get("conn_type")
        )
        if not base_url:
            raise ValueError(f"connection {conn_id!r} has no host: set it to the endpoint's base URL")
        return cls._from_parts(base_url, conn.get("password") or extra.get("api_key") or "", extra, conn_id)

    @classmethod
    def from_env(cls, conn_id: str = DEFAULT_CONN_ID, environ: Mapping[str, str] | None = None) -> LLMConfig:
        """``AIRFLOW_CONN_<CONN_ID>`` (JSON form) when set, else ``DATAMIND_LLM_*`` variables.

        DATAMIND_LLM_BASE_URL, DATAMIND_LLM_API_KEY, DATAMIND_LLM_MODEL (all roles),
        DATAMIND_LLM_MODEL_<ROLE>, DATAMIND_LLM_TIMEOUT_S, DATAMIND_LLM_MAX_CONCURRENCY,
        DATAMIND_LLM_MAX_RETRIES, DATAMIND_LLM_HTTP_BACKEND, DATAMIND_LLM_PRICES (JSON as in the connection extra).
        """
        env = os.environ if environ is None else environ
        conn_json = env.get(f"AIRFLOW_CONN_{conn_id.upper()}")
        if conn_json and conn_json.lstrip().startswith("{"):
            try:
                conn = json.loads(conn_json)
            except json.JSONDecodeError as exc:
                raise ValueError(f"AIRFLOW_CONN_{conn_id.upper()} is not valid JSON ({exc.msg})") from None
            return cls.from_connection_dict(conn, conn_id=conn_id)
        base_url = env.get("DATAMIND_LLM_BASE_URL", "")
        if not base_url:
            from datamind.llm.local import connection_extra, recorded_endpoint

            # the embedded local model is the default only where nothing else is configured
            local = recorded_endpoint() if conn_id == DEFAULT_CONN_ID else None
            if local is not None:
                return cls._from_parts(local.base_url, "", connection_extra(local), conn_id)
            raise ValueError(
                f"no LLM endpoint configured: set connection {conn_id!r} (AIRFLOW_CONN_{conn_id.upper()}) "
                "or DATAMIND_LLM_BASE_URL, or start the local model (make serve-model)"
            )
        extra: dict[str, Any] = {}
        if env.get("DATAMIND_LLM_MODEL"):
            extra["model"] = env["DATAMIND_LLM_MODEL"]
        models = {
            r: env[f"DATAMIND_LLM_MODEL_{r.upper()}"] for r in ROLES if env.get(f"DATAMIND_LLM_MODEL_{r.upper()}")
        }
        if models:
            extra["models"] = models
        for key in ("timeout_s", "max_concurrency", "max_retries", "http_backend"):
            if env.get(f"DATAMIND_LLM_{key.upper()}"):
                extra[key] = env[f"DATAMIND_LLM_{key.upper()}"]
        if env.get("DATAMIND_LLM_PRICES"):
            extra["prices"] = _parse_extra(env["DATAMIND_LLM_PRICES"], "DATAMIND_LLM_PRICES")
        return cls._from_parts(base_url, env.get("DATAMIND_LLM_API_KEY", ""), extra, conn_id)

    @classmethod
    def _from_parts(cls, base_url: str, api_key: str, extra: Mapping[str, Any], conn_id: str) -> LLMConfig:
        models = {r: str(extra["model"]) for r in ROLES} if extra.get("model") else {}
        models.update({str(k): str(v) for k, v in (extra.get("models") or {}).items()})
        numeric = {
            "timeout_s": float,
            "max_concurrency": int,
            "min_concurrency": int,
            "max_retries": int,
            "max_throttle_retries": int,
            "backoff_base_s": float,
            "backoff_max_s": float,
            "breaker_threshold": int,
            "breaker_cooldown_s": float,
        }
        kwargs: dict[str, Any] = {}
        for key, typ in numeric.items():
            if extra.get(key) is not None:
                try:
                    kwargs[key] = typ(extra[key])
                except (TypeError, ValueError):
                    raise ValueError(
                        f"connection {conn_id!r}: extra.{key} must be a number, got {extra[key]!r}"
                    ) from None
        prices = parse_prices(extra.get("prices"), f"connection {conn_id!r}")
        params = {str(r): dict(p) for r, p in (extra.get("params") or {}).items()}
        if extra.get("http_backend"):
            kwargs["http_backend"] = str(extra["http_backend"])
        if extra.get("grammar"):
            kwargs["grammar"] = str(extra["grammar"])
        return cls(
            base_url=base_url.rstrip("/"),
            api_key=str(api_key),
            models=models,
            params=params,
            prices=prices,
            conn_id=conn_id,
            **kwargs,
        )


def parse_prices(raw: Any, where: str) -> dict[str, Price]:
    """model -> Price from ``{"model": {"prompt": usd_per_mtok, "completion": usd_per_mtok}}``."""
    prices = {}
    for model, p in (raw or {}).items():
        try:
            prices[str(model)] = Price(float(p["prompt"]), float(p["completion"]), float(p.get("batch", 0.5)))
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"{where}: price for {model!r} must be {{'prompt': usd_per_mtok, 'completion': usd_per_mtok}}"
            ) from None
    return prices


def prices_from_env(env: Mapping[str, str] | None = None) -> dict[str, Price]:
    """The prices a deployment configured in DATAMIND_LLM_PRICES (none when unset)."""
    raw = (env if env is not None else os.environ).get("DATAMIND_LLM_PRICES")
    return parse_prices(_parse_extra(raw, "DATAMIND_LLM_PRICES"), "DATAMIND_LLM_PRICES") if raw else {}


def _parse_extra(extra: Any, where: str) -> dict[str, Any]:
    if extra is None or extra == "":
        return {}
    if isinstance(extra, Mapping):
        return dict(extra)
    try:
        value = json.loads(extra)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: extra must be a JSON object ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: extra must be a JSON object, got {type(value).__name__}")
    return value


def _base_url(host: str, schema: str | None, port: Any, conn_type: str | None = None) -> str:
    """A full URL in ``host`` wins; otherwise build one from the split fields.

    Airflow fills ``schema`` two ways: HTTP-style connections keep the scheme there ("http"), while a
    connection given as a URI (``http://:KEY@vllm:8000/v1``) keeps the path there ("v1").
    """
    host = host.strip()
    if not host or "://" in host:
        return host
    schema = (schema or "").strip().strip("/")
    if schema in ("http", "https"):
        scheme, path = schema, "v1"
    else:
        scheme, path = (conn_type if conn_type in ("http", "https") else "https"), schema or "v1"
    netloc = f"{host}:{port}" if port else host
    return f"{scheme}://{netloc}/{path}"
