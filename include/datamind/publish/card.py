"""The dataset card (``README.md`` of a version) and the files a version carries.

A version folder is self-contained: its Parquet parts, the data files its samples analyse (under
``files/<file_id>/``, which is what ``data_uri`` points at, relative to the folder), its manifest and this
card.  The card's YAML header is what dataset hubs parse (configs, features, license, size); the body
is for people: where every input file came from, what the recipe was, what is known to be missing.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections import Counter
from collections.abc import Collection, Mapping

import fsspec
import pyarrow as pa
import yaml

from datamind.publish import promotion
from datamind.schemas import DATASET
from datamind.shards import column_counts

FILES_DIR = "files"
SPLITS = ("train", "test")


def _bucket(file_id: str) -> float:
    return int.from_bytes(hashlib.sha256(f"split|{file_id}".encode()).digest()[:8], "big") / 2**64


def held_out_files(
    file_ids, test_fraction: float, min_files: int = 0, multi_table: Collection[str] = ()
) -> frozenset[str]:
    """The files whose samples form the held-out ``test`` split: every sample of a file lands on one side,
    so no table is trained on and then tested on.

    ``file_ids``: the release's files, or a mapping of each to its number of samples (a plain list counts one
    each). Files are taken in the order of their hash bucket, which keeps a file on its side as the corpus
    grows (a file moves only at the boundary), while the test split's share of *samples* approaches
    ``test_fraction``: a file that would take the share further from it is passed over (a demo of six files held
    out 29% of its samples where 10% was asked). A small corpus can leave one file or none there, and one
    file's quirks (its encoding, its format) are then what a held-out evaluation measures; so files that keep
    the share closest top the split up to ``min_files``, never past half the files. Where two or more files
    hold questions over several tables (``multi_table``), both splits get some (the read found every join
    question in the test split). ``test_fraction`` 0 holds nothing out."""
    counts = dict(file_ids) if isinstance(file_ids, Mapping) else dict.fromkeys(file_ids, 1)
    ids = sorted(counts, key=lambda f: (_bucket(f), f))
    if not ids or test_fraction <= 0:
        return frozenset()
    target, cap = test_fraction * sum(counts.values()), len(ids) // 2
    held: list[str] = []
    got = 0
    for f in ids:
        if len(held) >= cap or got >= target:
            break
        if abs(got + counts[f] - target) < abs(got - target):
            held.append(f)
            got += counts[f]
    while len(held) < min(min_files, cap):
        f = min((f for f in ids if f not in held), key=lambda f: (abs(got + counts[f] - target), _bucket(f), f))
        held.append(f)
        got += counts[f]
    multi = [f for f in ids if f in set(multi_table)]
    inside = [f for f in multi if f in held]
    if len(multi) >= 2 and (not inside or len(inside) == len(multi)):
        held = _mix_multi_table(held, multi, inside, counts, target, test_fraction)
    return frozenset(held)


def _mix_multi_table(
    held: list[str], multi: list[str], inside: list[str], counts: dict, target: float, fraction: float
) -> list[str]:
    """``held`` with one multi-table file moved across (the smallest in, or the largest out), alone or traded for
    a single-table file, where the share of samples stays within 0.05 of the fraction (or no further from it
    than before): the fraction comes first, a few files cannot always give both."""
    total = target / fraction
    gap = abs(sum(counts[f] for f in held) - target) / total
    moves: list[list[str]] = []
    if not inside:
        add = min(multi, key=lambda f: (counts[f], f))
        moves.append([*held, add])
        moves += [[*(h for h in held if h != out), add] for out in held if out not in multi]
    else:
        out = max(inside, key=lambda f: (counts[f], f))
        rest = [h for h in held if h != out]
        moves.append(rest)
        moves += [[*rest, add] for add in counts if add not in held and add not in multi]
    fits = [m for m in moves if m and abs(sum(counts[f] for f in m) - target) / total <= max(0.05, gap)]
    return min(fits, key=lambda m: (abs(sum(counts[f] for f in m) - target), sorted(m))) if fits else held


def _row_sample_lines(sources: list[dict]) -> list[str]:
    """Which files the release holds as a sample of their rows: a question over one is about that sample."""
    sampled = [s for s in sources if s.get("row_sample")]
    if not sampled:
        return []
    lines = ["", "Files larger than the row limit are kept as a seeded random sample of their rows:", ""]
    for s in sampled:
        r = s["row_sample"]
        lines.append(
            f"- `{s['file_id']}` ({s['name']}): {r['rows']:,} of its {r['of_rows']:,} data rows, seed {r['seed']}; "
            "every question and answer is about this sample."
        )
    return lines


def carried_path(file_id: str, data_uri: str) -> str:
    """Where a sample's data file lives inside the version folder (also its ``data_uri``)."""
    name = posixpath.basename(data_uri.split("://", 1)[-1].rstrip("/")) or "data"
    return posixpath.join(FILES_DIR, file_id, name)


def read_source_file(uri: str) -> bytes:
    with fsspec.open(uri, "rb") as fh:
        return fh.read()


def hf_feature(name: str, t: pa.DataType) -> dict:
    """One ``dataset_info.features`` entry in the Hugging Face card format."""
    if pa.types.is_list(t) and pa.types.is_struct(t.value_type):
        return {"name": name, "list": [hf_feature(f.name, f.type) for f in t.value_type]}
    if pa.types.is_list(t):
        return {"name": name, "sequence": hf_feature("item", t.value_type)["dtype"]}
    if pa.types.is_timestamp(t):
        return {"name": name, "dtype": f"timestamp[{t.unit}, tz={t.tz}]" if t.tz else f"timestamp[{t.unit}]"}
    return {"name": name, "dtype": "string" if pa.types.is_string(t) or pa.types.is_large_string(t) else str(t)}


def _size_category(n: int) -> str:
    for bound, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < bound:
            return label
    return "n>1M"


def render_card(manifest: dict, rows: pa.Table, sources: list[dict]) -> str:
    """README.md with a Hugging Face style YAML header, from the release's manifest, its rows' light fields
    (split, category, hop, answer_check) and file provenance."""
    vid = manifest["version_id"]
    n = rows.num_rows
    by_split = column_counts(rows, "split")
    header = {
        "pretty_name": f"DataMind agent trajectories {vid}",
        "license": "other",
        "task_categories": ["question-answering", "table-question-answering"],
        "size_categories": [_size_category(n)],
        # Both splits share the parts (a row's `split` column says which): one hub split holds them all,
        # so a loader never counts a row twice.
        "configs": [{"config_name": "default", "data_files": [{"split": "all", "path": "part-*.parquet"}]}],
        "dataset_info": {
            "features": [hf_feature(f.name, f.type) for f in DATASET.schema],
            "splits": [{"name": "all", "num_examples": n}],
        },
    }
    cats = column_counts(rows, "category")
    hops = column_counts(rows, "hop")
    checks = Counter()
    for check, count in column_counts(rows, "answer_check").items():
        checks[check or "unknown"] += count
    lines = [
        "---",
        yaml.safe_dump(header, sort_keys=False, allow_unicode=True).rstrip(),
        "---",
        "",
        f"# DataMind agent trajectories, {vid}",
        "",
        "Multi-turn ReAct trajectories (`<think>`, `<code>`, `<interpreter>`, `<answer>`) of a data-analysis agent "
        "answering questions about CSV/XLSX files (Python) and SQLite databases (SQL), made by the DATAMIND recipe: "
        "questions synthesised over 18 task categories with easy-to-hard composition, N sampled trajectories per "
        "question in a sandbox, a self-consistency judge with reflection, a check against the answer computed by "
        "executing the question's reference program, and rule filters.",
        "",
        "## Use",
        "",
        "```python",
        "import datasets",
        f"ds = datasets.load_dataset('parquet', data_files='{vid}/part-*.parquet')['train']",
        "train = ds.filter(lambda r: r['split'] == 'train')  # 'test' is held out by source file",
        "```",
        "",
        "`data_uri` is relative to this folder: the data file a sample analyses is shipped in `files/`.",
        "",
        "## Contents",
        "",
        f"- samples: {n} ({', '.join(f'{s}: {by_split.get(s, 0)}' for s in SPLITS)}); "
        f"content hash `{manifest['content_hash']}`; schema `{DATASET.name}` {DATASET.version}",
        f"- answer check against the executed reference: {dict(sorted(checks.items()))}",
        "",
        "| category | samples |",
        "|---|---:|",
        *[f"| {c} | {n} |" for c, n in sorted(cats.items())],
        "",
        "| hops | samples |",
        "|---:|---:|",
        *[f"| {h} | {n} |" for h, n in sorted(hops.items())],
        "",
        *writer_lines((manifest.get("audit") or {}).get("samples_per_writers") or {}),
        promotion.card_section(manifest.get("promotion")),
        "",
        *cost_lines(manifest.get("cost") or {}),
        "",
        "## Audit",
        "",
        "Figures of `python -m datamind.publish.audit` on this release (thresholds in `datamind/publish/audit.py`):",
        "",
        "```json",
        json.dumps({k: v for k, v in (manifest.get("audit") or {}).items() if not isinstance(v, dict)}, indent=2),
        "```",
        "",
        "## Source files",
        "",
        "| file_id | file | source | license | split | samples |",
        "|---|---|---|---|---|---:|",
        *[
            f"| `{s['file_id']}` | {s['name']} | {s.get('source') or ''} | {s.get('license') or 'unknown'} | "
            f"{s['split']} | {s['samples']} |"
            for s in sources
        ],
        *_row_sample_lines(sources),
        "",
        "## Recipe",
        "",
        "```json",
        json.dumps(
            {
                "judge_params": manifest.get("judge_params"),
                "template_versions": manifest.get("template_versions"),
                "filters": manifest.get("filters"),
                "test_fraction": manifest.get("test_fraction"),
                "min_test_files": manifest.get("min_test_files"),
            },
            indent=2,
            sort_keys=True,
            default=str,
        ),
        "```",
        "",
        "## Decontamination",
        "",
        *_decontamination_lines(manifest.get("decontamination") or {}),
        "",
        "## Known limitations",
        "",
        "- Questions and programs of the offline engine come from templates over the column roles of each table; "
        "their wording is varied but narrower than an LLM synthesiser's.",
        "- The offline judge compares answers on their surface (numbers within tolerance, normalised words); "
        "paraphrased descriptive answers need the LLM judge.",
        "- Licenses are those recorded by the crawler (Kaggle metadata); files from folders carry `unknown`.",
        "",
    ]
    return "\n".join(lines)


def writer_lines(writers: dict) -> list[str]:
    """Who wrote the samples (``model`` and ``question_model`` columns): trajectory model -> question model ->
    samples, as the audit counts them."""
    if not writers:
        return []
    return [
        "Who wrote the samples: `model` wrote the trajectory, `question_model` the question (`offline`: the "
        "offline engine).",
        "",
        "| written by (`model`) | question by (`question_model`) | samples |",
        "|---|---|---:|",
        *[f"| {_cell(m)} | {_cell(q)} | {n} |" for m, questions in writers.items() for q, n in questions.items()],
        "",
    ]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def cost_lines(cost: dict) -> list[str]:
    """The release's LLM usage per accepted sample, overall and by category x hop."""
    total = cost.get("total") or {}
    lines = ["## LLM cost per accepted sample", ""]
    if not total.get("prompt_tokens") and not total.get("completion_tokens"):
        return lines + ["No LLM call went into these samples (offline engine): they cost no tokens."]
    usd = "" if cost.get("priced") else " (some models have no configured price: their dollars are not counted)"
    lines += [
        f"Synthesis and sampling calls behind each sample, the failed trajectories included{usd}. "
        f"Overall: {total['paid_tokens_per_sample']:,} paid tokens and ${total['usd_per_sample']:.6f} per sample; "
        f"the response cache answered {total['cached_tokens_per_sample']:,} tokens per sample "
        f"(${total['saved_usd']:.4f} saved in all).",
        "",
        "| category / hop | samples | paid tokens / sample | cached tokens / sample | USD / sample |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, c in (cost.get("by_category_hop") or {}).items():
        lines.append(
            f"| {key} | {c['samples']} | {c['paid_tokens_per_sample']:,} | {c['cached_tokens_per_sample']:,} | "
            f"{c['usd_per_sample']:.6f} |"
        )
    return lines


def _decontamination_lines(d: dict) -> list[str]:
    files, n_q = d.get("files") or {}, d.get("questions", 0)
    if not files and not n_q:
        return ["No benchmark files or questions were found in the inputs (benchmarks: `DATAMIND_BENCHMARKS`)."]
    lines = [
        f"{len(files)} input file(s) rejected as a benchmark's tables (`benchmark_overlap`) and {n_q} synthesized "
        "question(s) dropped for a long word overlap with a benchmark question (`benchmark_question_overlap`).",
    ]
    if files:
        lines += ["", "| file | why |", "|---|---|"]
        lines += [f"| {name} | {why} |" for name, why in sorted(files.items())[:200]]
    return lines
