"""The training run protocol, in one torch-free module: what a run prints, what it records, what it returns.

Every way of training (the built-in trainer, LLaMA-Factory, verl) and every way of starting one (a local
process, a Kubernetes Job, an ssh host) speaks it, so a launcher reads any engine's run the same way:

* stdout lines ``DATAMIND_PROGRESS {json}`` (metrics as they come) and one ``DATAMIND_RESULT {json}`` (the
  ``RunResult``) from the run's rank 0;
* ``runs/train/<run_id>/manifest.json`` in the data root, rewritten at each status change (``running``,
  ``succeeded`` with the result, ``failed`` with the error): the record when the output stream is lost.

Launchers and DAG tasks import this without pulling torch into their process.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from datamind.assets import DIRS

if TYPE_CHECKING:
    from datamind.storage import DataRoot

PROGRESS_PREFIX = "DATAMIND_PROGRESS "
RESULT_PREFIX = "DATAMIND_RESULT "
MANIFEST_NAME = "manifest.json"


class TrainingError(RuntimeError):
    """The run itself failed: no samples, a model that is not local, an engine that exited non-zero."""


@dataclass(frozen=True)
class RunResult:
    run_id: str
    checkpoint_uri: str
    manifest_uri: str
    metrics_uri: str
    dataset_version: str
    final_metrics: dict = field(default_factory=dict)
    exit_code: int = 0  # set by the launcher that waited for the process

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, exit_code: int = 0) -> RunResult:
        return cls(
            run_id=data["run_id"],
            checkpoint_uri=data["checkpoint_uri"],
            manifest_uri=data["manifest_uri"],
            metrics_uri=data["metrics_uri"],
            dataset_version=data["dataset_version"],
            final_metrics=data.get("final_metrics") or {},
            exit_code=exit_code,
        )


def run_dir(run_id: str) -> str:
    """A run's folder in the data root (relative)."""
    return posixpath.join(DIRS["runs"], "train", run_id)


def manifest_path(run_id: str) -> str:
    return posixpath.join(run_dir(run_id), MANIFEST_NAME)


def progress_line(fields: dict[str, Any]) -> str:
    return PROGRESS_PREFIX + json.dumps(fields, sort_keys=True, default=str)


def result_line(result: RunResult) -> str:
    return RESULT_PREFIX + json.dumps(result.to_dict(), sort_keys=True, default=str)


def progress(line: str) -> dict | None:
    """The metrics dict of a progress line, else None."""
    return json.loads(line[len(PROGRESS_PREFIX) :]) if line.startswith(PROGRESS_PREFIX) else None


def result(line: str) -> dict | None:
    """The result dict of a result line, else None."""
    return json.loads(line[len(RESULT_PREFIX) :]) if line.startswith(RESULT_PREFIX) else None


@dataclass
class RunRecord:
    """The run's manifest: the fields every engine records, written again at each status change."""

    root: DataRoot
    run_id: str
    engine: str
    dataset_version: str
    export_dir: str
    config: dict
    world_size: int
    main: bool = True  # only rank 0 writes
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def write(self, status: str, *, result: RunResult | None = None, error: str | None = None, **extra) -> None:
        if not self.main:
            return
        doc = {
            "run_id": self.run_id,
            "status": status,
            "engine": self.engine,
            "dataset_version": self.dataset_version,
            "export_dir": self.export_dir,
            "config": self.config,
            "started_at": self.started_at,
            "updated_at": datetime.now(UTC).isoformat(),
            "world_size": self.world_size,
            **extra,
        }
        if result is not None:
            doc["result"] = result.to_dict()
        if error is not None:
            doc["error"] = error[-2000:]
        self.root.write_text(manifest_path(self.run_id), json.dumps(doc, indent=2, sort_keys=True, default=str))

    def uri(self, *parts: str) -> str:
        return self.root.uri(run_dir(self.run_id), *parts)
