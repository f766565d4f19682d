"""Releases written the way publishing writes them (the dataset schema, part files, a manifest with the
audit computed by the real audit), with rows generated from a seed: for the viewer's tests and its benchmark."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

from datamind.agent.protocol import format_answer_turn, format_code_turn, format_interpreter
from datamind.categories import CATEGORY_IDS
from datamind.ids import safe_run_id
from datamind.publish import promotion
from datamind.publish.audit import AuditTally
from datamind.review.query import PUBLISH_REJECTIONS
from datamind.schemas import DATASET, REJECTIONS, TRAJECTORIES, rejection
from datamind.shards import table_to_parquet_bytes
from datamind.storage import DataRoot

NOW = datetime(2026, 11, 27, tzinfo=UTC)
TEACHER, OFFLINE_EXPERT = "qwen2.5-coder-0.5b-instruct", "offline-expert"


def writers(i: int) -> tuple[str, str]:
    """Who wrote sample ``i`` (trajectory, question): every 4th the teacher alone, every 8th (from 1) the teacher's
    trajectory on an offline question, the others the offline engine."""
    if i % 4 == 3:
        return TEACHER, TEACHER
    return (TEACHER, "offline") if i % 8 == 1 else (OFFLINE_EXPERT, "offline")


SYSTEM = "You are a senior data analyst. Think in <think>, run code in <code>, answer in <answer>."


def sample_row(i: int, rng: random.Random, flawed: bool = False) -> dict:
    category = CATEGORY_IDS[i % len(CATEGORY_IDS)]
    hop = 1 + (i % 5 if i % 3 == 0 else 0)
    fmt = ("csv", "xlsx", "sqlite")[i % 3]
    city = rng.choice(["Lyon", "Porto", "Graz", "Oslo"])
    value = round(rng.uniform(10, 1000), 2)
    warn = i % 97 == 96  # a few samples print a warning: the audit's warning figure counts them
    output = f"{value}\n" + ("FutureWarning: the default of observed will change\n" if warn else "")
    question = f"What is the mean amount for {city} in file {i % 40} (item {i})?"
    if flawed and i % 50 == 1:  # a doubled word: the audit's repeated-word figure has a threshold of 0
        question = question.replace("the mean", "the the mean")
    # thoughts worded differently per sample, as a varied release has them (the audit counts repeated ones)
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6))
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Data source: `orders_{i % 40}.csv` (csv)\n\nQuestion: {question}"},
    ]
    if i % 10 == 0:  # a failed cell the agent recovers from
        messages += [
            {"role": "assistant", "content": format_code_turn(f"A first look at {word}.", "print(df.amt.mean())")},
            {"role": "tool", "content": format_interpreter("NameError: name 'df' is not defined")},
        ]
    code = (
        f"import pandas as pd\ndf = pd.read_csv('orders_{i % 40}.csv')\n"
        f"print(round(df[df['city'] == '{city}']['amount'].mean(), 2))"
    )
    messages += [
        {"role": "assistant", "content": format_code_turn(f"For {word} I keep the rows of {city} and average.", code)},
        {"role": "tool", "content": format_interpreter(output)},
        {"role": "assistant", "content": format_answer_turn(f"So {word} gives {value}.", str(value))},
    ]
    return {
        "sample_id": f"s{i:07d}",
        "query_id": f"q{i:07d}",
        "trajectory_id": f"t{i:07d}",
        "file_id": f"f{i % 40:03d}",
        "data_uri": f"files/f{i % 40:03d}/orders_{i % 40}.csv",
        "data_format": fmt,
        "category": category,
        "hop": hop,
        "question": question,
        "messages": messages,
        "final_answer": str(value),
        "reference_answer": str(value),
        "judge_verdict": "yes",
        "answer_check": "verified" if i % 4 else "consistent_unverified",
        "judge_reasoning": "3 of 3 trajectories agree",
        "selection_strategy": "majority",
        "reflection_round": 0,
        "model": writers(i)[0],
        "question_model": writers(i)[1],
        "template_versions": "{}",
        "split": "test" if i % 10 == 0 else "train",
        "created_at": NOW,
    }


def write_release(
    root: DataRoot, version: int, n: int, *, shard_rows: int = 5000, seed: int = 7, flawed: bool = False
) -> dict:
    """Release ``v<version>`` with ``n`` generated samples (``flawed``: some miss an audit threshold); returns
    its manifest."""
    rng = random.Random(seed)
    tally = AuditTally()
    vdir = f"dataset/v{version}"
    files = {}
    for start in range(0, n, shard_rows):
        rows = [sample_row(i, rng, flawed) for i in range(start, min(n, start + shard_rows))]
        for r in rows:
            tally.add(r)
            files[r["file_id"]] = {"path": r["data_uri"], "sha256": "0" * 64, "bytes": 10}
        data = table_to_parquet_bytes(DATASET.to_table(rows))
        root.write_bytes(f"{vdir}/part-{start // shard_rows:05d}.parquet", data)
    audit = tally.figures()
    manifest = {
        "version": version,
        "version_id": f"v{version}",
        "content_hash": f"hash{version:04d}",
        "n_samples": n,
        "created_at": NOW.isoformat(),
        "run_id": f"manual__publish_v{version}",
        "files": dict(sorted(files.items())),  # as publishing records the data files it carries
        "audit": audit,
        "promotion": promotion.initial(audit, approve_every=False),
    }
    root.write_text(f"{vdir}/README.md", promotion.card_section(manifest["promotion"]) + "\n")
    root.write_text(f"{vdir}/manifest.json", json.dumps(manifest, indent=2, default=str))
    return manifest


def write_run(root: DataRoot, run_id: str) -> dict:
    """One sampling run's trajectories (answered and a sandbox failure) and a publishing rejection whose sample
    is in ``judged``; returns the ids. Rows record the run id as stages do (made safe for file names)."""
    run_id = safe_run_id(run_id)
    rng = random.Random(3)
    base = sample_row(5, rng)
    trajectories = [
        {"trajectory_id": "traj-ok", "query_id": "q0000005", "sample_index": 0, "reflection_round": 0,
         "messages": base["messages"], "final_answer": base["final_answer"], "n_turns": 2, "n_void_turns": 0,
         "status": "answered", "model": "offline", "policy": "reference", "template_version": "{}",
         "prompt_tokens": 0, "completion_tokens": 0, "created_at": NOW, "run_id": run_id, "error": None,
         "sampling_params": "{}"},
        {"trajectory_id": "traj-broken", "query_id": "q0000005", "sample_index": 1, "reflection_round": 0,
         "messages": base["messages"][:2], "final_answer": None, "n_turns": 0, "n_void_turns": 0,
         "status": "error", "model": "offline", "policy": "reference", "template_version": "{}",
         "prompt_tokens": 0, "completion_tokens": 0, "created_at": NOW, "run_id": run_id,
         "error": "sandbox_failure: SandboxUnavailable: set-up failed", "sampling_params": "{}"},
        {"trajectory_id": "traj-other-run", "query_id": "q0000006", "sample_index": 0, "reflection_round": 0,
         "messages": base["messages"], "final_answer": "1", "n_turns": 2, "n_void_turns": 0,
         "status": "answered", "model": "offline", "policy": "reference", "template_version": "{}",
         "prompt_tokens": 0, "completion_tokens": 0, "created_at": NOW, "run_id": "another-run", "error": None,
         "sampling_params": "{}"},
    ]  # fmt: skip
    root.write_bytes("trajectories/part-run.parquet", table_to_parquet_bytes(TRAJECTORIES.to_table(trajectories)))
    judged = {**base, "sample_id": "judged-dropped", "final_answer": "é" * 3 + "Ã©"}
    root.write_bytes("judged/params=abc/part-0.parquet", table_to_parquet_bytes(DATASET.to_table([judged])))
    rows = [
        rejection(PUBLISH_REJECTIONS, "judged-dropped", "linguistic:mojibake", "the answer holds mojibake ('Ã©')",
                  file_id=base["file_id"], query_id=base["query_id"], raw=judged["final_answer"], run_id=run_id,
                  created_at=NOW),
        rejection("judge", "q0000009", "no_consensus", "the three answers disagree", query_id="q0000009",
                  run_id=run_id, created_at=NOW),
        # the judge's record of a fine trajectory it did not keep: not a rejection
        rejection("judge", "traj-not-kept", "not_selected", "con_select kept another trajectory of this query",
                  query_id="q0000005", run_id=run_id, created_at=NOW),
    ]  # fmt: skip
    root.write_bytes(
        f"rejections/{PUBLISH_REJECTIONS}/part-run.parquet", table_to_parquet_bytes(REJECTIONS.to_table(rows))
    )
    return {
        "trajectories": ["traj-ok", "traj-broken"],
        "rejections": ["judged-dropped", "q0000009"],
        "not_selected": ["traj-not-kept"],
    }
