"""The parameters of evaluate_agent: its form, the Python API and the eval id read them from here.

Kept free of heavy imports: the DAG file reads the defaults at parse time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from datamind.agent.equivalence import REL_TOL
from datamind.llm.config import GRAMMAR_FIELDS
from datamind.llm.serving import ENGINES as SERVE_ENGINES
from datamind.stage_params import StageParams, check_ranges, param
from datamind.vocabulary import EVAL_SUITES

SUITE_KINDS = EVAL_SUITES
OFFLINE_AGENT = "offline"


@dataclass(frozen=True)
class EvalParams(StageParams):
    """The form of evaluate_agent (and the Python API): every default lives here."""

    agent_conn_id: str = param(
        OFFLINE_AGENT,
        "Agent Connection",
        description="OpenAI-compatible endpoint of the agent under test; 'offline' = reference policy (held-out).",
    )
    model: str | None = param(None, "Model", description="Overrides the Connection's model.")
    checkpoint: str | None = param(
        None,
        "Checkpoint folder",
        description="A train_agent checkpoint to serve on this worker as the agent; "
        "on a new checkpoint event it is filled in from the event.",
    )
    serve_engine: str = param(
        "auto",
        "How a checkpoint is served",
        enum=SERVE_ENGINES,
        description="vllm on a GPU worker, transformers (transformers serve) on a CPU worker, llama.cpp for a "
        ".gguf file; auto picks by the checkpoint and the worker.",
        fingerprint=False,
    )
    # kind -> folder or file ("heldout" -> a version, "" = latest); its form default comes from the deployment
    suites: dict = param(
        None,
        "Suites",
        factory=dict,
        description='Suite kind -> folder or file, e.g. {"dabench": "/data/dabench", "heldout": ""}.',
    )
    trials: int = param(3, "Trials per question", minimum=1, maximum=16)  # paper, appendix D: 3 trials
    temperature: float = param(0.7, "Temperature", minimum=0, maximum=2)
    top_p: float = param(0.95, "Top-p", minimum=0.01, maximum=1)
    max_turns: int = param(10, "Max turns", minimum=1, maximum=50)
    max_tokens: int = param(2048, "Tokens per turn", minimum=16, maximum=32768)
    # None, not "": the UI form sends an emptied field as null, and a "" default it could not send back refused
    # the form's own defaults
    grammar: str | None = param(
        None,
        "Grammar for a served checkpoint",
        enum=(*(g for g in GRAMMAR_FIELDS if g), None),
        description="Constrain a served checkpoint's turns to the tag format: empty (none: what the model learned "
        "shows), 'llama.cpp' or 'vllm' (the engine's grammar field). A Connection's agent uses the Connection's.",
    )
    withhold_data: bool = param(
        False,
        "Withhold the data file",
        description="A leak control: no data file is staged and the task says so; an answer that is still "
        "correct came from the model's memory of the benchmark, not from the data.",
    )
    judge_conn_id: str | None = param(None, "Judge Connection", description="Empty: rule-based judges only.")
    limit: int | None = param(None, "Questions per suite (empty = all)", minimum=1)
    rel_tol: float = param(REL_TOL, "Numeric tolerance", minimum=0, maximum=1)  # paper: 3 % for free-form answers
    concurrency: int = param(8, "Concurrent trials", minimum=1, maximum=64, fingerprint=False)
    exec_workers: int = param(2, "Sandbox executions at once", minimum=1, maximum=64, fingerprint=False)
    FINGERPRINT_LENGTH = 12

    def __post_init__(self) -> None:
        unknown = set(self.suites) - set(SUITE_KINDS)
        if unknown:
            raise ValueError(f"unknown suite kinds {sorted(unknown)}; known: {', '.join(SUITE_KINDS)}")
        check_ranges(self)
        if self.checkpoint and self.agent_conn_id != OFFLINE_AGENT:
            raise ValueError("give either a checkpoint to serve or an agent_conn_id, not both")
        if not self.suites:
            raise ValueError("name at least one suite, e.g. {'dabench': '/data/dabench'}")

    # fields added after evaluations were recorded: at their defaults they leave the eval id as it was
    _LATER = {"grammar": None, "withhold_data": False}

    def fingerprint_view(self) -> dict[str, Any]:
        view = super().fingerprint_view()
        return {k: v for k, v in view.items() if k not in self._LATER or v != self._LATER[k]}

    @classmethod
    def normalize(cls, raw: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in raw.items() if v is not None and v != ""}  # a field the form left empty: default

    @property
    def offline(self) -> bool:
        return self.agent_conn_id == OFFLINE_AGENT and not self.checkpoint

    def eval_id(self) -> str:
        return "eval-" + self.fingerprint


def deployment_suites() -> dict:
    """The suites a deployment evaluates on unless told otherwise: ``DATAMIND_BENCHMARKS`` (the JSON object
    decontamination reads too), else the latest held-out split."""
    raw = os.environ.get("DATAMIND_BENCHMARKS", "").strip()
    return json.loads(raw) if raw else {"heldout": ""}
