"""Declared, versioned Parquet data contracts: one ``pa.schema`` per table, in one place.

Every shard carries ``datamind.table`` and ``datamind.schema_version`` in its Arrow metadata.
A reader refuses a shard whose major version differs from the code's (a breaking change needs a
migration, never a silent misread); minor versions only add nullable columns.
Tables are plain Parquet (zstd) so duckdb, polars and ``datasets.load_dataset("parquet")`` read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class TableSchema:
    name: str
    version: str  # "MAJOR.MINOR"
    schema: pa.Schema
    doc: str = ""

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def arrow_schema(self) -> pa.Schema:
        return self.schema.with_metadata({"datamind.table": self.name, "datamind.schema_version": self.version})

    def to_table(self, rows: list[dict]) -> pa.Table:
        """Rows -> Arrow table; missing nullable keys become null, missing required keys raise."""
        table = pa.Table.from_pylist(rows, schema=self.schema) if rows else self.schema.empty_table()
        for f in self.schema:
            if not f.nullable and table.column(f.name).null_count:
                raise ValueError(f"{self.name}: required column {f.name!r} has nulls")
        return table.replace_schema_metadata(self.arrow_schema().metadata)

    def check(self, table: pa.Table, where: str = "") -> None:
        meta = table.schema.metadata or {}
        got = meta.get(b"datamind.schema_version", b"").decode()
        name = meta.get(b"datamind.table", b"").decode()
        if name and name != self.name:
            raise ValueError(f"{where}: shard belongs to table {name!r}, expected {self.name!r}")
        if got and int(got.split(".")[0]) != self.major:
            raise ValueError(
                f"{where}: {self.name} schema version {got} is incompatible with code version {self.version}"
            )


def _f(name: str, typ: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable=nullable)


_STR = pa.string()
_STRS = pa.list_(pa.string())

TABLE_VERDICT = pa.struct(
    [
        _f("table_name", _STR),
        _f("status", _STR),
        _f("reason_code", _STR),
        _f("reason", _STR),
        _f("n_rows", pa.int64()),
        _f("n_cols", pa.int32()),
        _f("read_options", _STR),  # JSON: how formats.load_table reloads this table (1.1)
    ]
)

CATALOG_FILES = TableSchema(
    "catalog_files",
    "1.1",
    pa.schema(
        [
            _f("file_id", _STR, False),
            _f("source", _STR, False),
            _f("source_uri", _STR, False),
            _f("rel_path", _STR, False),
            _f("format", _STR, False),  # detected from content: csv | xlsx | sqlite | unknown
            _f("declared_format", _STR),  # what the extension claims
            _f("status", _STR, False),  # accepted | rejected
            _f("reason_code", _STR),
            _f("reason", _STR),
            _f("content_sha256", _STR, False),
            _f("size_bytes", pa.int64(), False),
            _f("encoding", _STR),
            _f("n_tables", pa.int32()),
            _f("n_rows", pa.int64()),  # summed over accepted tables
            _f("n_cols", pa.int32()),  # summed over accepted tables
            _f("staged_uri", _STR),  # copy under the data root (accepted files only)
            _f("provenance", _STR),  # JSON: dataset ref, version, license, url, ...
            _f("table_verdicts", pa.list_(TABLE_VERDICT)),
            _f("ingested_at", TS, False),
            _f("run_id", _STR),
        ]
    ),
    "One row per input file ever seen, accepted or rejected with a reason.",
)

COLUMN_PROFILE = pa.struct(
    [
        _f("name", _STR),
        _f("dtype", _STR),
        _f("kind", _STR),  # numeric | integer | datetime | boolean | categorical | text | id
        _f("n_null", pa.int64()),
        _f("n_unique", pa.int64()),
        _f("min", _STR),
        _f("max", _STR),
        _f("mean", pa.float64()),
        _f("std", pa.float64()),
        _f("unique_values", _STRS),  # capped sample of distinct values, most frequent first
        _f("description", _STR),
        _f("role", _STR),  # datamind.roles: identifier | additive_measure | nonadditive_measure | category | ...
    ]
)

FOREIGN_KEY = pa.struct([_f("from_table", _STR), _f("from_column", _STR), _f("to_table", _STR), _f("to_column", _STR)])

CATALOG_TABLES = TableSchema(
    "catalog_tables",
    "1.1",
    pa.schema(
        [
            _f("table_id", _STR, False),
            _f("file_id", _STR, False),
            _f("source", _STR, False),
            _f("format", _STR, False),
            _f("table_name", _STR, False),
            _f("n_rows", pa.int64(), False),
            _f("n_cols", pa.int32(), False),
            _f("columns", _STRS),
            _f("column_profiles", pa.list_(COLUMN_PROFILE)),
            _f("head_markdown", _STR),
            _f("description", _STR),
            _f("ddl", _STR),  # sqlite: CREATE TABLE statement
            _f("foreign_keys", pa.list_(FOREIGN_KEY)),
            _f("primary_key", _STRS),  # declared primary key columns (sqlite)
            _f("meta_info", _STR),  # JSON consumed by the synthesis prompts
            _f("read_options", _STR),  # JSON: how to load the table identically downstream
            _f("staged_uri", _STR, False),
            _f("profiled_at", TS, False),
            _f("run_id", _STR),
        ]
    ),
    "One row per accepted table (CSV = 1, XLSX = 1 per sheet, SQLite = 1 per table).",
)

REJECTIONS = TableSchema(
    "rejections",
    "1.0",
    pa.schema(
        [
            _f("item_id", _STR, False),
            _f("stage", _STR, False),
            _f("reason_code", _STR, False),
            _f("reason", _STR),
            _f("file_id", _STR),
            _f("query_id", _STR),
            _f("raw", _STR),  # the offending text (LLM output, trajectory JSON), truncated
            _f("created_at", TS, False),
            _f("run_id", _STR),
        ]
    ),
    "Every item dropped by any stage after ingestion, with the stage and the reason.",
)

QUERIES = TableSchema(
    "queries",
    # 1.1: cached_*_tokens
    "1.1",
    pa.schema(
        [
            _f("query_id", _STR, False),
            _f("file_id", _STR, False),
            _f("table_id", _STR),
            _f("tables", _STRS),
            _f("data_format", _STR),  # csv | xlsx | sqlite
            _f("category", _STR, False),
            _f("hop", pa.int8(), False),  # 1 = single task, 2..5 = composed
            _f("parent_query_ids", _STRS),
            _f("root_query_id", _STR),
            _f("question", _STR, False),
            _f("description", _STR),
            _f("solution_lang", _STR),  # python | sql
            _f("reference_solution", _STR),  # self-contained program that prints the answer
            # Alternative programs through other engines (pandas, DuckDB SQL, SQLite SQL) expected to print
            # the same answer; the offline expert samples its N trajectories from reference + variants.
            _f("solution_variants", _STRS),
            _f("reference_answer", _STR),
            _f("backend", _STR, False),  # offline | llm
            _f("model", _STR),
            _f("template_version", _STR),
            _f("prompt_tokens", pa.int64()),
            _f("completion_tokens", pa.int64()),
            _f("created_at", TS, False),
            _f("run_id", _STR),
            # 1.1: of prompt/completion_tokens, those the response cache answered (not paid again)
            _f("cached_prompt_tokens", pa.int64()),
            _f("cached_completion_tokens", pa.int64()),
        ]
    ),
    "Synthesized questions with lineage (hop, parents) and reference solutions where known.",
)

REASON_LIMIT, RAW_LIMIT = 2000, 4000


def rejection(
    stage: str,
    item_id: str,
    reason_code: str,
    reason: str | None,
    *,
    file_id: str | None = None,
    query_id: str | None = None,
    raw: str | None = None,
    run_id: str | None = None,
    created_at: datetime | None = None,
) -> dict:
    """One ``rejections`` row: every stage records what it dropped, and why, through this."""
    return {
        "item_id": item_id,
        "stage": stage,
        "reason_code": reason_code,
        "reason": reason[:REASON_LIMIT] if reason else reason,
        "file_id": file_id,
        "query_id": query_id,
        "raw": raw[:RAW_LIMIT] if raw else raw,
        "created_at": created_at or datetime.now(UTC),
        "run_id": run_id,
    }


MESSAGE = pa.struct([_f("role", _STR), _f("content", _STR)])

TRAJECTORIES = TableSchema(
    "trajectories",
    # 1.2: sampling_params (reflection resamples with the parameters round 0 used); 1.3: cached_*_tokens
    "1.3",
    pa.schema(
        [
            _f("trajectory_id", _STR, False),
            _f("query_id", _STR, False),
            _f("sample_index", pa.int16(), False),
            _f("reflection_round", pa.int16(), False),
            _f("messages", pa.list_(MESSAGE)),
            _f("final_answer", _STR),
            _f("n_turns", pa.int16()),
            _f("n_void_turns", pa.int16()),
            _f("status", _STR),  # answered | max_turns | error
            _f("model", _STR),
            _f("policy", _STR),  # offline variant name or LLM sampling config
            _f("template_version", _STR),
            _f("prompt_tokens", pa.int64()),
            _f("completion_tokens", pa.int64()),
            _f("created_at", TS, False),
            _f("run_id", _STR),
            _f("error", _STR),  # 1.1: reason code (and detail) when status == error
            _f("sampling_params", _STR),  # 1.2: JSON of the RolloutParams that sampled it
            # 1.3: of prompt/completion_tokens, those the response cache answered (not paid again)
            _f("cached_prompt_tokens", pa.int64()),
            _f("cached_completion_tokens", pa.int64()),
        ]
    ),
    "Every sampled ReAct trajectory, before judging.",
)

DATASET = TableSchema(
    "dataset",
    # 1.1: answer_check (the selected answer against the executed reference); split (held out by source file);
    # data_uri relative to the version folder, which carries the data files. 1.2: question_model
    "1.2",
    pa.schema(
        [
            _f("sample_id", _STR, False),
            _f("query_id", _STR, False),
            _f("trajectory_id", _STR, False),
            _f("file_id", _STR, False),
            _f("data_uri", _STR),
            _f("data_format", _STR),
            _f("category", _STR, False),
            _f("hop", pa.int8(), False),
            _f("question", _STR, False),
            _f("messages", pa.list_(MESSAGE), False),
            _f("final_answer", _STR, False),
            _f("reference_answer", _STR),
            _f("judge_verdict", _STR),
            _f(
                "answer_check", _STR
            ),  # verified | consistent_unverified | refuted (kept only by non-consistency ablations)
            _f("judge_reasoning", _STR),
            _f("selection_strategy", _STR),
            _f("reflection_round", pa.int16()),
            # who wrote the trajectory (its turns): the served model's name, or the offline engine's
            # ("offline-expert"); the trajectory's own ``model``
            _f("model", _STR),
            _f("template_versions", _STR),  # JSON {stage: version}
            _f("split", _STR),  # train | test (held out by source file); set when a version is published
            _f("created_at", TS, False),
            # 1.2: who wrote the question: the synthesizer's served model, or "offline" (the offline engine)
            _f("question_model", _STR),
        ]
    ),
    "The product: judged, filtered, multi-turn trajectories ready for SFT/RL.",
)

ALL = {s.name: s for s in (CATALOG_FILES, CATALOG_TABLES, REJECTIONS, QUERIES, TRAJECTORIES, DATASET)}

# -- training (datamind.train) ------------------------------------------------------------------
RL_EXPORT = TableSchema(
    "rl_export",
    "1.0",
    pa.schema(
        [
            _f("data_source", _STR, False),
            _f("prompt", pa.list_(MESSAGE), False),  # system + user turns (verl applies the chat template)
            _f("ability", _STR),
            _f("reward_model", pa.struct([_f("style", _STR), _f("ground_truth", _STR)])),
            _f(
                "extra_info",
                pa.struct(
                    [
                        _f("split", _STR),
                        _f("index", pa.int64()),
                        _f("sample_id", _STR),
                        _f("query_id", _STR),
                        _f("question", _STR),
                        _f("category", _STR),
                        _f("hop", pa.int8()),
                        _f("file_id", _STR),
                        _f("data_uri", _STR),
                        _f("data_format", _STR),
                        _f("dataset_version", _STR),
                    ]
                ),
            ),
            # Expert continuation for the SFT term; loss_mask 0 marks interpreter (environment) turns.
            _f("target", pa.list_(pa.struct([_f("role", _STR), _f("content", _STR), _f("loss_mask", pa.int8())]))),
        ]
    ),
    "verl RL layout of the dataset, one row per sample (exports/<dataset_version>/rl/train.parquet).",
)

TRAIN_METRICS = TableSchema(
    "train_metrics",
    "1.0",
    pa.schema(
        [
            _f("run_id", _STR, False),
            _f("phase", _STR, False),  # sft | sft+rl
            _f("step", pa.int64(), False),  # optimizer step within the phase
            _f("global_step", pa.int64(), False),
            _f("epoch", pa.float64()),
            _f("loss", pa.float64()),
            _f("sft_loss", pa.float64()),
            _f("dapo_loss", pa.float64()),
            _f("gamma", pa.float64()),
            _f("reward_mean", pa.float64()),
            _f("reward_std", pa.float64()),
            _f("answer_acc", pa.float64()),
            _f("format_rate", pa.float64()),
            _f("entropy", pa.float64()),
            _f("filtered_group_frac", pa.float64()),  # groups with all-equal rewards (SFT term only)
            _f("void_turn_frac", pa.float64()),  # rollouts masked for containing a void turn
            _f("clip_frac", pa.float64()),
            _f("lr", pa.float64()),
            _f("grad_norm", pa.float64()),
            _f("n_tokens", pa.int64()),
            _f("step_time_s", pa.float64()),
            _f("logged_at", TS, False),
        ]
    ),
    "One row per optimizer step of a training run (runs/train/<run_id>/metrics.parquet).",
)

ALL.update({s.name: s for s in (RL_EXPORT, TRAIN_METRICS)})


# -- evaluation (datamind.evaluate) --------------------------------------------------------------
EVAL_RESULTS = TableSchema(
    "eval_results",
    "1.0",
    pa.schema(
        [
            _f("eval_id", _STR, False),
            _f("suite", _STR, False),  # dabench | tablebench | bird | heldout
            _f("item_id", _STR, False),
            _f("trial", pa.int16(), False),
            _f("category", _STR),  # DABench concept, TableBench qtype/subtype, BIRD db_id, or our category
            _f("hop", pa.int8()),  # held-out split only
            _f("question", _STR, False),
            _f("gold", _STR),  # the benchmark's answer, as it publishes it
            _f("final_answer", _STR),
            _f("correct", pa.bool_(), False),
            _f("outcome", _STR, False),  # vocabulary.EVAL_OUTCOMES
            _f("judge", _STR, False),  # which judge gave the verdict
            _f("judge_reasoning", _STR),
            _f("status", _STR),  # the trajectory's status
            _f("n_turns", pa.int16()),
            _f("messages", pa.list_(MESSAGE)),
            _f("model", _STR),
            _f("created_at", TS, False),
        ]
    ),
    "One row per benchmark question x trial, with the agent's whole trajectory and the verdict.",
)
ALL[EVAL_RESULTS.name] = EVAL_RESULTS
