"""Training exports of the final dataset: LLaMA-Factory (SFT) and verl (RL), versioned and byte-reproducible.

Input: the ``dataset`` table (``schemas.DATASET``) under the data root.
Output, under ``exports/<dataset_version>/``:

- ``sft/datamind_sft.jsonl`` + ``sft/dataset_info.json`` -- LLaMA-Factory's sharegpt layout with
  OpenAI-style ``messages``; interpreter turns keep the role ``tool``, mapped to LLaMA-Factory's
  *observation* tag, which it never trains on.
- ``rl/train.parquet`` -- verl's RL layout (``data_source``, ``prompt``, ``ability``,
  ``reward_model.ground_truth``, ``extra_info``) plus ``target``: the expert continuation for the SFT
  term, each message with ``loss_mask`` (1 agent, 0 environment).
- ``manifest.json`` -- counts, file hashes and every rejected sample with its reason.

The version is a hash of the dataset's content (``created_at`` excluded, so rebuilding identical
data does not mint a new version). Rows are sorted by ``sample_id`` and no timestamp is written into
an export file, so the same dataset always gives the same bytes.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from datetime import UTC, datetime

from datamind.agent.protocol import split_conversation
from datamind.assets import DIRS
from datamind.ids import sha256_bytes, stable_id
from datamind.schemas import REJECTIONS, RL_EXPORT, rejection
from datamind.shards import table_to_parquet_bytes, write_shard
from datamind.stages import STAGES
from datamind.storage import DataRoot
from datamind.tables import release_rows

SFT_DATASET_NAME = "datamind_sft"
SFT_FILE = "sft/datamind_sft.jsonl"
DATASET_INFO_FILE = "sft/dataset_info.json"
RL_FILE = "rl/train.parquet"
MANIFEST_FILE = "manifest.json"
EXPORT_FORMAT_VERSION = "1"


@dataclass(frozen=True)
class ExportResult:
    version: str
    export_dir: str  # URI of exports/<version>
    sft_path: str
    dataset_info_path: str
    rl_path: str
    n_rows: int
    n_rejected: int
    reused: bool
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def dataset_version(rows: list[dict]) -> str:
    """Content hash of dataset rows, independent of shard layout, row order and ``created_at``."""
    canon = sorted(({k: v for k, v in r.items() if k != "created_at"} for r in rows), key=lambda r: r["sample_id"])
    return "ds-" + stable_id(EXPORT_FORMAT_VERSION, canon)


def _sft_line(messages: list[dict]) -> str:
    return json.dumps({"messages": messages}, ensure_ascii=False, separators=(",", ":"))


def dataset_info_entry(file_name: str = posixpath.basename(SFT_FILE)) -> dict:
    return {
        SFT_DATASET_NAME: {
            "file_name": file_name,
            "formatting": "sharegpt",
            "columns": {"messages": "messages"},
            "tags": {
                "role_tag": "role",
                "content_tag": "content",
                "user_tag": "user",
                "assistant_tag": "assistant",
                "observation_tag": "tool",
                "system_tag": "system",
            },
        }
    }


def _rl_row(index: int, row: dict, prompt: list[dict], target: list[dict], version: str) -> dict:
    return {
        "data_source": "datamind",
        "prompt": prompt,
        "ability": "data_analysis",
        "reward_model": {"style": "model", "ground_truth": row["final_answer"]},
        "extra_info": {
            "split": "train",
            "index": index,
            "sample_id": row["sample_id"],
            "query_id": row["query_id"],
            "question": row["question"],
            "category": row["category"],
            "hop": int(row["hop"]),
            "file_id": row["file_id"],
            "data_uri": row.get("data_uri"),
            "data_format": row.get("data_format"),
            "dataset_version": version,
        },
        "target": [
            {"role": m["role"], "content": m["content"], "loss_mask": 1 if m["role"] == "assistant" else 0}
            for m in target
        ],
    }


def export(
    root: DataRoot,
    *,
    dataset_dir: str | None = None,
    exports_dir: str = DIRS["exports"],
    version: str | None = None,
    force: bool = False,
    run_id: str | None = None,
) -> ExportResult:
    """Build (or reuse) both exports of a dataset release under ``exports/<version>/``.

    By default the newest promoted release (never one awaiting approval or rejected), named by its version
    id (``v<N>``, the same name as its folder).  Only its ``train`` split is exported: the held-out ``test``
    files are for evaluation."""
    if dataset_dir is None:
        from datamind.tables import read_manifest, trainable_manifest

        manifest = trainable_manifest(root)
        if manifest is None:
            newest = read_manifest(root)
            where = root.uri(DIRS["dataset"])
            if newest is None:
                raise ValueError(f"no complete dataset release under {where}; nothing to export")
            state = (newest.get("promotion") or {}).get("status")
            raise ValueError(
                f"no promoted dataset release under {where} (v{newest['version']} is {state}); nothing to export"
            )
        version = version or manifest.get("version_id") or f"v{manifest['version']}"
        dataset_dir = posixpath.join(DIRS["dataset"], f"v{manifest['version']}")
    rows = [r for r in release_rows(root, dataset_dir).to_pylist() if r.get("split") != "test"]
    if not rows:
        raise ValueError(f"no training rows under {root.uri(dataset_dir)}; nothing to export")
    for r in rows:  # data files travel with the release: make their location relative to the data root
        uri = r.get("data_uri")
        if uri and "://" not in uri and not uri.startswith("/"):
            r["data_uri"] = posixpath.join(dataset_dir, uri)
    ids = [r["sample_id"] for r in rows]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise ValueError(f"dataset has duplicate sample_id(s) {dup}; refusing to export ambiguous data")
    version = version or dataset_version(rows)
    base = posixpath.join(exports_dir, version)

    if not force and root.exists(base, MANIFEST_FILE):
        manifest = json.loads(root.read_text(base, MANIFEST_FILE))
        if all(root.exists(base, rel) for rel in manifest["files"]):
            return _result(root, base, manifest, reused=True)

    sft_lines, rl_rows, rejected = [], [], []
    for row in sorted(rows, key=lambda r: r["sample_id"]):
        try:
            prompt, target = split_conversation(row["messages"])
            if not (row.get("final_answer") or "").strip():
                raise ValueError("no_ground_truth: final_answer is empty")
        except ValueError as exc:
            code, _, reason = str(exc).partition(": ")
            rejected.append({"sample_id": row["sample_id"], "reason_code": code, "reason": reason})
            continue
        sft_lines.append(_sft_line(prompt + target))
        rl_rows.append(_rl_row(len(rl_rows), row, prompt, target, version))
    if not rl_rows:
        raise ValueError(f"all {len(rows)} dataset rows were rejected; first: {rejected[0]}")

    payloads = {
        SFT_FILE: ("\n".join(sft_lines) + "\n").encode("utf-8"),
        DATASET_INFO_FILE: (json.dumps(dataset_info_entry(), indent=2, sort_keys=True) + "\n").encode(),
        RL_FILE: table_to_parquet_bytes(RL_EXPORT.to_table(rl_rows)),
    }
    for rel, data in payloads.items():
        root.write_bytes(posixpath.join(base, rel), data)
    manifest = {
        "export_format_version": EXPORT_FORMAT_VERSION,
        "dataset_version": version,
        "n_rows": len(rl_rows),
        "n_rejected": len(rejected),
        "rejected": rejected,
        "files": {rel: sha256_bytes(data) for rel, data in payloads.items()},
        "llamafactory": {"dataset_dir": "sft", "dataset": SFT_DATASET_NAME},
        "verl": {"train_files": RL_FILE},
    }
    # The manifest goes last: its presence means every file it lists is complete.
    root.write_text(posixpath.join(base, MANIFEST_FILE), json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if rejected:
        now = datetime.now(UTC)
        write_shard(
            root,
            REJECTIONS,
            posixpath.join(DIRS["rejections"], STAGES["train_agent"].rejections),
            [
                rejection(
                    STAGES["train_agent"].rejections,
                    r["sample_id"],
                    r["reason_code"],
                    r["reason"],
                    run_id=run_id,
                    created_at=now,
                )
                for r in rejected
            ],
            name=f"export-{version}.parquet",
        )
    return _result(root, base, manifest, reused=False)


def _result(root: DataRoot, base: str, manifest: dict, reused: bool) -> ExportResult:
    return ExportResult(
        version=manifest["dataset_version"],
        export_dir=root.uri(base),
        sft_path=root.uri(base, SFT_FILE),
        dataset_info_path=root.uri(base, DATASET_INFO_FILE),
        rl_path=root.uri(base, RL_FILE),
        n_rows=manifest["n_rows"],
        n_rejected=manifest["n_rejected"],
        reused=reused,
        files=manifest["files"],
    )
