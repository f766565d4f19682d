"""A deployment's settings per stage, and what a run under other settings would do again.

**Where they live.** One JSON object per stage, ``{form field: value}``, in the Airflow Variable
``datamind_settings_<dag_id>`` (Admin > Variables in the UI, ``airflow variables set`` / ``import``, an
``AIRFLOW_VAR_DATAMIND_SETTINGS_<DAG_ID>`` environment variable or a secrets backend: wherever the deployment keeps
its Variables). Only the fields a stage's settings name are set; the rest keep the stage's defaults.

**Who reads them.** Every run of the stage, however it started: the trigger form shows them as its defaults, and
each run resolves its parameters as the stage's defaults, then these settings, then what the run's conf names
explicitly (a manual run's form values, ``-c`` of ``airflow dags test``, a backfill's conf). An Asset-triggered run
has no conf, so it runs under the settings, as the run before it did; a person's run overrides them for that run.

**Why it matters.** Synthesis and judging write one partition per parameter fingerprint (``params=<fp>``) and plan
"items not done under this fingerprint": a run under other settings does every item again, and each later stage
pays for its new rows. ``redo`` says so before a run spends anything: which items other settings already covered,
under which fingerprint, and which settings differ.

Plain Python: the Airflow side (``datamind_airflow.deployment``) reads the Variable and hands the values here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

PREFIX = "datamind_settings_"
# The stages whose runs start without a person (an Asset event): their settings are what those runs use.
STAGES = (
    "profile_files",
    "synthesize_queries",
    "sample_trajectories",
    "judge_trajectories",
    "publish_dataset",
    "train_agent",
    "evaluate_agent",
)


def variable_name(dag_id: str) -> str:
    """The Airflow Variable holding ``dag_id``'s settings."""
    return f"{PREFIX}{dag_id}"


def parse(dag_id: str, raw: Any, known: Iterable[str]) -> dict[str, Any]:
    """The stored settings of ``dag_id`` as a dict (``None`` or blank: none), checked against the stage's form
    fields ``known``: a value that is not a JSON object, or a key that is no field (a typo), is an error naming
    the Variable, never a silent default."""
    where = f"Variable {variable_name(dag_id)}"
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not JSON: {exc}") from exc
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a JSON object of form fields, got {type(raw).__name__}")
    known = set(known)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{where} names unknown field(s) {unknown}; the stage's fields: {sorted(known)}")
    return dict(raw)


@dataclass(frozen=True)
class Resolved:
    """A run's parameters and where each value that is not a default came from."""

    params: dict[str, Any]
    from_settings: dict[str, Any] = field(default_factory=dict)
    from_conf: dict[str, Any] = field(default_factory=dict)

    def summary(self, dag_id: str) -> dict[str, Any]:
        """What a task log shows: the settings the run took and what its conf overrode."""
        return {
            f"settings ({variable_name(dag_id)})": self.from_settings or "none: the stage's defaults",
            "this run's conf overrides": self.from_conf or "none",
        }


def resolve(params: Mapping[str, Any], stored: Mapping[str, Any], conf: Mapping[str, Any] | None) -> Resolved:
    """``params`` (Airflow's: form defaults updated by the run's conf), with each stored setting the run's conf
    does not name explicitly. Form defaults may be stale or the class defaults (the form is built when the DAG
    file is parsed, where the Variable may be out of reach), so the settings are applied again at run time."""
    conf = dict(conf or {})
    out = dict(params)
    from_settings = {k: v for k, v in stored.items() if k not in conf}
    out.update(from_settings)
    from_conf = {k: v for k, v in conf.items() if k in stored and stored[k] != v}
    return Resolved(out, from_settings, from_conf)


# -- a run that would redo what other settings covered ------------------------------------------------------
@dataclass(frozen=True)
class Redo:
    """Items a run will do again although a run under other settings did them."""

    stage: str
    fingerprint: str
    item: str  # what the stage plans: "tables" or "queries"
    n_items: int
    n_files: int
    by_fingerprint: dict[str, int]  # the other partitions' fingerprints -> their items this run redoes
    differs: dict[str, tuple[Any, Any]]  # setting -> (value that covered the most of them, this run's value)

    def message(self) -> str:
        parts = ", ".join(f"params={fp}: {n}" for fp, n in self.by_fingerprint.items())
        diff = "; ".join(f"{k}: {old!r} there, {new!r} now" for k, (old, new) in self.differs.items())
        return (
            f"{self.stage} will redo {self.n_items} {self.item} ({self.n_files} data files) that runs under other "
            f"settings already covered ({parts}): this run's settings fingerprint is {self.fingerprint}. "
            f"Settings that differ: {diff or 'none visible (an older version of the stage)'}. Each redone item "
            "costs again here and in every later stage. If this is not intended, set the Variable "
            f"{variable_name(self.stage)} to the settings that covered them (or pass them as this run's conf)."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            f"{self.item}_redone": self.n_items,
            "files_redone": self.n_files,
            "covered_under": self.by_fingerprint,
            "settings_differ": {k: list(v) for k, v in self.differs.items()},
        }


def _view(p: Any) -> dict[str, Any]:
    """What of ``p`` (a stage's parameters) its fingerprint sees, flat: a nested parameter set (the judge's
    rollout) as ``rollout.<field>``, the judge as the one that runs. Fields that never change a fingerprint are
    left out."""
    kept = set(p.fingerprint_fields())
    d = {k: v for k, v in p.to_dict().items() if k in kept}
    if hasattr(p, "judge") and hasattr(p, "rollout_params"):
        d["judge_backend"] = p.judge
        d.pop("rollout", None)
        d.update({f"rollout.{k}": v for k, v in _view(p.rollout_params).items()})
    return d


def _differs(cls: type, old: Mapping[str, Any], new: Any) -> dict[str, tuple[Any, Any]]:
    """The settings whose values differ between the recorded ``old`` ones and ``new`` (a ``cls``)."""
    try:
        before = _view(cls.from_form(dict(old)))
    except (TypeError, ValueError):  # recorded by another version of the stage: compare as written
        before = dict(old)
    after = _view(new)
    keys = sorted(set(before) | set(after))
    return {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}


def _files(root, schema, rel_dir: str, key: str, ids: set[str], paths: list[str] | None = None) -> int:
    """How many data files the rows of ``ids`` (values of ``key``) are about."""
    from datamind.shards import read_table

    if not ids or paths == []:
        return 0
    t = read_table(root, schema, rel_dir, columns=[key, "file_id"], paths=paths)
    return len({f for k, f in zip(t.column(key).to_pylist(), t.column("file_id").to_pylist(), strict=True) if k in ids})


def _redo(stage, item, fp, here, others, cls, new, settings_of, files_of) -> Redo | None:
    """``others``: fingerprint -> items done there; ``settings_of(fp)``: the settings that wrote that partition."""
    by_fp = {other: len(done - here) for other, done in others.items() if other != fp and done - here}
    if not by_fp:
        return None
    redone = set().union(*(others[o] - here for o in by_fp))
    closest = max(by_fp, key=lambda o: (by_fp[o], o))
    return Redo(
        stage=stage,
        fingerprint=fp,
        item=item,
        n_items=len(redone),
        n_files=files_of(redone),
        by_fingerprint=dict(sorted(by_fp.items(), key=lambda kv: (-kv[1], kv[0]))),
        differs=_differs(cls, settings_of(closest), new),
    )


def _synthesis(root, params: Any) -> Redo | None:
    from datamind import tables
    from datamind.assets import DIRS
    from datamind.schemas import CATALOG_TABLES
    from datamind.synth.params import SynthParams

    p = SynthParams.given(params)
    fp = p.fingerprint
    parts = {name.removeprefix("params="): tables.queries(root, name.removeprefix("params=")) for name in
             tables.partitions(root, "queries")}  # fmt: skip
    records = {other: part.records() for other, part in parts.items()}
    others = {other: {i for r in recs.values() for i in r["items"]} for other, recs in records.items()}
    here = others.get(fp, set())

    def settings_of(other: str) -> dict:
        return next((r["params"] for r in records[other].values() if isinstance(r.get("params"), dict)), {})

    def files_of(ids: set[str]) -> int:
        return _files(root, CATALOG_TABLES, DIRS["catalog_tables"], "table_id", ids)

    return _redo("synthesize_queries", "tables", fp, here, others, SynthParams, p, settings_of, files_of)


def _judging(root, params: Any) -> Redo | None:
    from datamind import tables
    from datamind.assets import DIRS
    from datamind.judge.params import JudgeParams
    from datamind.schemas import QUERIES

    p = JudgeParams.given(params)
    fp = p.fingerprint
    names = [name.removeprefix("params=") for name in tables.judged_partitions(root)]
    others = {other: tables.judged(root, f"params={other}").done() for other in names}
    here = others.get(fp, set())

    def settings_of(other: str) -> dict:
        rel = f"{DIRS['judged']}/params={other}/params.json"
        return json.loads(root.read_text(rel)) if root.exists(rel) else {}

    def files_of(ids: set[str]) -> int:
        paths = [path for name in tables.partitions(root, "queries")
                 for path in tables.queries(root, name.removeprefix("params=")).files("queries")]  # fmt: skip
        return _files(root, QUERIES, DIRS["queries"], "query_id", ids, paths)

    return _redo("judge_trajectories", "queries", fp, here, others, JudgeParams, p, settings_of, files_of)


_REDO = {"synthesize_queries": _synthesis, "judge_trajectories": _judging}


def redo(stage: str, root, params: Any) -> Redo | None:
    """What a run of ``stage`` with ``params`` (an instance of the stage's parameter class) would do again that
    runs under other settings covered (None: nothing; stages whose output is not partitioned by their settings
    never redo)."""
    check = _REDO.get(stage)
    return check(root, params) if check else None
