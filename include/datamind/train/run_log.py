"""What a built-in training run leaves behind: metrics per step, progress lines, checkpoints and its manifest.

Only rank 0 writes; every rank averages its metrics with the others first, so the row rank 0 writes is the
step's, not one rank's. The line formats and the manifest's fields are the run protocol's
(``datamind.train.protocol``), shared with the external engines.
"""

from __future__ import annotations

import json
import os
import posixpath
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from datamind.schemas import TRAIN_METRICS
from datamind.shards import table_to_parquet_bytes
from datamind.storage import DataRoot
from datamind.train.protocol import MANIFEST_NAME, RunRecord, RunResult, progress_line, run_dir


class RunLog:
    def __init__(self, root: DataRoot, record: RunRecord, dist: Any, emit: Callable[[str], None], log_every: int):
        self.root, self.record, self.dist, self.emit = root, record, dist, emit
        self.log_every = max(1, log_every)
        self.dir = run_dir(record.run_id)
        self.metrics: list[dict] = []
        self.global_step = 0

    @property
    def run_id(self) -> str:
        return self.record.run_id

    def note(self, text: str) -> None:
        if self.dist.main:
            self.emit(f"[datamind.train] {text}")

    def step(self, phase: str, step: int, epoch: float, t0: float, **values) -> None:
        """Record optimizer step ``step`` (0-based) of ``phase``, started at ``t0`` (perf_counter)."""
        values["step_time_s"] = time.perf_counter() - t0
        values = self.dist.mean_metrics(values)
        if values.get("n_tokens") is not None:
            values["n_tokens"] *= self.dist.world  # a count: summed over ranks, not averaged
        self.global_step += 1
        row = {
            "run_id": self.run_id,
            "phase": phase,
            "step": step + 1,
            "global_step": self.global_step,
            "epoch": epoch,
            **values,
        }
        row["n_tokens"] = int(row["n_tokens"]) if row.get("n_tokens") is not None else None
        row["logged_at"] = datetime.now(UTC)
        self.metrics.append(row)
        if not self.dist.main:
            return
        if (step + 1) % self.log_every == 0:
            self.emit(progress_line({k: v for k, v in row.items() if v is not None and k != "logged_at"}))
        self.root.write_bytes(
            posixpath.join(self.dir, "metrics.parquet"), table_to_parquet_bytes(TRAIN_METRICS.to_table(self.metrics))
        )

    def checkpoint(self, model: Any, tokenizer: Any, tag: str, base_model_path: str) -> str:
        """Save to ``checkpoints/<tag>/``; ``checkpoint.json`` is written last and marks it complete."""
        rel = posixpath.join(self.dir, "checkpoints", tag)
        if self.dist.main:
            with tempfile.TemporaryDirectory(prefix="datamind-ckpt-") as tmp:
                model.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
                files = sorted(os.listdir(tmp))
                self.root.remove(rel)
                for name in files:
                    self.root.put_file(os.path.join(tmp, name), posixpath.join(rel, name))
            meta = {
                "run_id": self.run_id,
                "tag": tag,
                "global_step": self.global_step,
                "files": files,
                "dataset_version": self.record.dataset_version,
                "base_model_path": base_model_path,
            }
            self.root.write_text(posixpath.join(rel, "checkpoint.json"), json.dumps(meta, indent=2, sort_keys=True))
            self.note(f"checkpoint {tag} -> {self.root.uri(rel)}")
        self.dist.barrier()
        return self.root.uri(rel)

    def result(self) -> RunResult:
        final = {k: v for k, v in (self.metrics[-1] if self.metrics else {}).items() if k != "logged_at"}
        return RunResult(
            run_id=self.run_id,
            checkpoint_uri=self.record.uri("checkpoints", "final"),
            manifest_uri=self.record.uri(MANIFEST_NAME),
            metrics_uri=self.record.uri("metrics.parquet"),
            dataset_version=self.record.dataset_version,
            final_metrics=final,
        )

    def manifest(self, status: str, **fields) -> None:
        import torch
        import transformers

        self.record.write(
            status,
            device=str(self.dist.device),
            versions={"torch": torch.__version__, "transformers": transformers.__version__},
            steps=self.global_step,
            **fields,
        )
