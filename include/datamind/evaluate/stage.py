"""evaluate_agent: the paper's benchmark protocol (appendix D) over suites, results as declared tables.

For each suite the agent answers every question ``trials`` times (temperature 0.7, top-p 0.95 by
default); each trial is judged; pass@1 is the mean correctness over trials (then over questions) and
pass@k is the share of questions with at least one correct trial among the k = ``trials`` run.

Outputs, under ``<data root>/eval/<eval_id>/`` (the id is a hash of the parameters, so a rerun with the
same parameters rewrites the same folder and never duplicates rows):

- ``results.parquet``: :data:`datamind.schemas.EVAL_RESULTS`, one row per question x trial with the
  agent's whole trajectory and the verdict with the judge that gave it;
- ``summary.json``: per suite ``n``, ``pass@1``, ``pass@<k>``, outcome counts and per-category figures;
- ``report.md``: the same as tables, plus a comparison across every evaluation in the data root.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
from collections import Counter, defaultdict
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Any

from datamind.agent.answer import LLMAnswerJudge, RuleAnswerJudge
from datamind.agent.loop import STATUS_ERROR, STATUS_MAX_TURNS
from datamind.agent.protocol import observation_failed, parse_turn
from datamind.evaluate import judges
from datamind.evaluate.params import EvalParams
from datamind.evaluate.runner import Runner, Trial
from datamind.evaluate.suites import EvalItem, SuiteError, load_suite
from datamind.ids import stable_id
from datamind.llm.errors import BatchPending
from datamind.quality.validate import validate_table
from datamind.schemas import EVAL_RESULTS
from datamind.shards import table_to_parquet_bytes
from datamind.storage import DataRoot

EVAL_DIR = "eval"
STAGE = "evaluate_agent"


# -- metrics -------------------------------------------------------------------------------------


def pass_at(outcomes: dict[str, list[bool]]) -> tuple[float, float]:
    """(pass@1, pass@k) over questions: the mean of each question's trial accuracy, and the share of
    questions with at least one correct trial."""
    if not outcomes:
        return 0.0, 0.0
    p1 = sum(sum(v) / len(v) for v in outcomes.values()) / len(outcomes)
    pk = sum(any(v) for v in outcomes.values()) / len(outcomes)
    return p1, pk


def _figures(rows: list[dict], k: int) -> dict[str, Any]:
    by_item: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        by_item[r["item_id"]].append(bool(r["correct"]))
    p1, pk = pass_at(by_item)
    return {"n": len(by_item), "pass@1": round(p1, 4), f"pass@{k}": round(pk, 4)}


def summarize(rows: list[dict], k: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for suite in sorted({r["suite"] for r in rows}):
        mine = [r for r in rows if r["suite"] == suite]
        per_cat: dict[str, list[dict]] = defaultdict(list)
        for r in mine:
            for cat in (c.strip() for c in (r["category"] or "unlabelled").split(",")):
                per_cat[cat].append(r)
            if r["hop"]:
                per_cat[f"hop {r['hop']}"].append(r)
        out[suite] = {
            **_figures(mine, k),
            **behaviour(mine),
            "outcomes": dict(sorted(Counter(r["outcome"] for r in mine).items())),
            "by_category": {c: _figures(v, k) for c, v in sorted(per_cat.items())},
        }
    return out


def behaviour(rows: list[dict]) -> dict[str, float]:
    """How the agent worked, whatever it answered: the share of its turns in the protocol's format, the share
    whose code ran without an error, and the share of trials that ended with an answer. Where a model is too
    weak to be right, these still show whether training taught it the work."""
    turns = valid = ran = 0
    for r in rows:
        msgs = r["messages"]
        for i, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            turns += 1
            t = parse_turn(m["content"])
            valid += not t.is_void
            if t.code is not None and not t.is_void and i + 1 < len(msgs) and msgs[i + 1]["role"] == "tool":
                ran += not observation_failed(msgs[i + 1]["content"])
        turns += r["outcome"] == "reply_truncated"  # a cut reply is not recorded, but it was a turn, and void
    answered = sum(bool((r["final_answer"] or "").strip()) for r in rows)
    return {
        "turns": turns,
        "valid_format": round(valid / turns, 4) if turns else 0.0,
        "runnable_code": round(ran / turns, 4) if turns else 0.0,
        "answer_rate": round(answered / len(rows), 4) if rows else 0.0,
    }


# -- judging -------------------------------------------------------------------------------------


def _outcome(trial: Trial, correct: bool) -> str:
    """One of ``EVAL_OUTCOMES``: what the agent did, kept apart from what the platform failed to do."""
    if correct:
        return "correct"
    r = trial.result
    if r is None:
        return "not_run"
    if r.status == STATUS_ERROR:
        if r.error in ("void_turn_limit", "reply_truncated"):
            return r.error
        return "sandbox_error" if (r.error or "").startswith("sandbox") else "endpoint_error"
    if r.status == STATUS_MAX_TURNS:
        return "max_turns"
    return "no_answer" if not (r.final_answer or "").strip() else "wrong"


async def _verdict(trial: Trial, text_judge) -> judges.Verdict:
    item, r = trial.item, trial.result
    if r is None:
        return judges.Verdict(False, "none", trial.error or "the agent did not run")
    if item.suite == "dabench":
        return judges.judge_dabench(r.final_answer, item.extra["labels"])
    if item.suite == "bird":
        return await asyncio.to_thread(judges.judge_sql, r.messages, item.gold, item.data_path)
    v = await text_judge.judge(item.question, r.final_answer, item.gold)
    return judges.Verdict(v.correct, v.judge if v.judge != "rule" else "rule:numeric_3pct", v.reasoning)


def judge_trials(trials: list[Trial], text_judge, eval_id: str, model: str | None = None) -> list[dict]:
    async def main():
        try:
            verdicts = await asyncio.gather(*(_verdict(t, text_judge) for t in trials), return_exceptions=True)
        finally:
            client = getattr(text_judge, "client", None)
            if client is not None:
                await client.aclose()  # its connections belong to this event loop
        return verdicts

    verdicts = asyncio.run(main())
    # Every verdict is asked before any failure counts, so batch mode collects them all in one pass; then a
    # failed judge call fails the evaluation (a retry asks again), as one unanswered question must not count.
    failed = [v for v in verdicts if isinstance(v, BaseException)]
    if failed:
        raise next((f for f in failed if not isinstance(f, BatchPending)), failed[0])
    now = datetime.now(UTC)
    rows = []
    for t, v in zip(trials, verdicts, strict=True):
        r = t.result
        rows.append(
            {
                "eval_id": eval_id,
                "suite": t.item.suite,
                "item_id": t.item.item_id,
                "trial": t.trial,
                "category": t.item.category,
                "hop": t.item.hop,
                "question": t.item.question,
                "gold": t.item.gold,
                "final_answer": r.final_answer if r else None,
                "correct": v.correct,
                "outcome": _outcome(t, v.correct),
                "judge": v.judge,
                "judge_reasoning": v.reasoning,
                "status": r.status if r else "error",
                "n_turns": r.n_turns if r else 0,
                "messages": [{"role": m["role"], "content": m["content"]} for m in r.messages] if r else [],
                "model": (r.model if r else None) or model or t.model,
                "created_at": now,
            }
        )
    return rows


# -- the stage -----------------------------------------------------------------------------------


def load_items(root: DataRoot, p: EvalParams) -> tuple[list[EvalItem], dict[str, dict]]:
    items: list[EvalItem] = []
    skipped: dict[str, dict] = {}
    for kind, location in sorted(p.suites.items()):
        loaded = load_suite(kind, location, root=root, table_dir=root.path(EVAL_DIR, "_tables", kind))
        chosen = loaded.items[: p.limit] if p.limit else loaded.items
        items += chosen
        skipped[kind] = dict(loaded.skipped)
    return items, skipped


def evaluate(
    root: DataRoot | str,
    params: EvalParams,
    agent_client: Any | None = None,
    judge_client: Any | None = None,
    *,
    sandbox: Any | None = None,
) -> dict[str, Any]:
    """Run, judge, write results + summary + report; returns the summary."""
    root = DataRoot.of(root)
    p = EvalParams.given(params)
    if p.offline and set(p.suites) - {"heldout"}:
        raise SuiteError("the offline reference policy has programs only for the held-out split; name an agent_conn_id")
    if p.checkpoint and agent_client is None:
        from datamind.evaluate.serve import serve
        from datamind.llm import LLMClient, LLMConfig, ResponseCache

        name = served_name(p.checkpoint)
        with serve(root.local_dir(p.checkpoint), name, p.serve_engine) as url:
            config = LLMConfig(base_url=url, api_key="", models={"agent": name}, timeout_s=600.0, max_retries=1,
                               grammar=p.grammar or "")  # fmt: skip
            client = LLMClient(config, cache=ResponseCache(root))
            return evaluate(root, replace(p, model=name), client, judge_client, sandbox=sandbox)
    if not p.offline and agent_client is None:
        raise ValueError(f"agent_conn_id {p.agent_conn_id!r} needs an LLM client")
    eval_id = p.eval_id()
    items, skipped = load_items(root, p)
    trials = Runner(p, agent_client, root=root, sandbox=sandbox).run(items)
    text_judge = LLMAnswerJudge(judge_client, rel_tol=p.rel_tol) if judge_client else RuleAnswerJudge(p.rel_tol)
    rows = judge_trials(trials, text_judge, eval_id, p.model)
    folder = posixpath.join(EVAL_DIR, eval_id)
    root.write_bytes(posixpath.join(folder, "results.parquet"), table_to_parquet_bytes(EVAL_RESULTS.to_table(rows)))
    models = sorted({r["model"] for r in rows if r["model"]})
    summary = {
        "eval_id": eval_id,
        "agent": "checkpoint" if p.checkpoint else p.agent_conn_id,  # a served checkpoint is no Connection
        "model": p.model or (models[0] if len(models) == 1 else models),
        "params": asdict(p),
        "trials": p.trials,
        "suites": summarize(rows, p.trials),
        "skipped": skipped,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    root.write_text(posixpath.join(folder, "summary.json"), json.dumps(summary, indent=2, sort_keys=True, default=str))
    root.write_text(posixpath.join(folder, "report.md"), render_report(summary, all_summaries(root)))
    # listed with the other quality reports (reports/index.html): the contract checks plus the figures
    quality = validate_table(root, EVAL_RESULTS.name, EVAL_RESULTS.to_table(rows), run_id=eval_id, stage=STAGE)
    summary["quality_report"] = quality.location
    return summary


def served_name(checkpoint: str) -> str:
    """The model id a served checkpoint answers as: cache entries never mix checkpoints."""
    return f"checkpoint-{stable_id(checkpoint, length=10)}"


def written_id(params: EvalParams) -> str:
    """The eval id an evaluation with ``params`` is written under (a served checkpoint's names its model)."""
    p = EvalParams.given(params)
    return (replace(p, model=served_name(p.checkpoint)) if p.checkpoint and not p.model else p).eval_id()


def all_summaries(root: DataRoot) -> list[dict]:
    out = []
    for path in sorted(root.glob(EVAL_DIR, "*", "summary.json")):
        try:
            out.append(json.loads(root.read_text(root.rel(path))))
        except (OSError, ValueError):
            continue
    return out


def render_report(summary: dict, others: list[dict]) -> str:
    k = summary["trials"]
    lines = [
        f"# Evaluation {summary['eval_id']}",
        "",
        f"Agent: `{summary['agent']}`, model: `{summary['model']}`, {k} trial(s) per question, "
        f"temperature {summary['params']['temperature']}, top-p {summary['params']['top_p']}.",
        "",
    ]
    for suite, fig in summary["suites"].items():
        lines += [
            f"## {suite}: pass@1 {fig['pass@1']:.1%}, pass@{k} {fig[f'pass@{k}']:.1%} over {fig['n']} questions",
            "",
            "Outcomes (question x trial): " + ", ".join(f"{o} {n}" for o, n in fig["outcomes"].items()),
            "",
            f"Turns {fig.get('turns', 0)}: {fig.get('valid_format', 0):.1%} in the turn format, "
            f"{fig.get('runnable_code', 0):.1%} with code that ran; {fig.get('answer_rate', 0):.1%} of trials "
            "ended with an answer.",
            "",
            f"| category | n | pass@1 | pass@{k} |",
            "|---|---:|---:|---:|",
        ]
        lines += [
            f"| {c} | {f['n']} | {f['pass@1']:.1%} | {f[f'pass@{k}']:.1%} |" for c, f in fig["by_category"].items()
        ]
        if summary["skipped"].get(suite):
            lines += ["", "Skipped: " + ", ".join(f"{r} {n}" for r, n in summary["skipped"][suite].items())]
        lines.append("")
    lines += [
        "## All evaluations in this data root, by suite (oldest first: the trend across releases and checkpoints)",
        "",
        "| suite | eval | agent | model | n | format | code ran | answered | pass@1 | pass@k |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows_by_suite = sorted(
        ((suite, s.get("created_at", ""), s, fig) for s in others for suite, fig in s.get("suites", {}).items()),
        key=lambda x: (x[0], x[1]),
    )
    for suite, _, s, fig in rows_by_suite:
        pk = fig.get(f"pass@{s.get('trials')}", 0.0)
        shares = " | ".join(
            f"{fig[key]:.1%}" if key in fig else "-" for key in ("valid_format", "runnable_code", "answer_rate")
        )
        lines.append(
            f"| {suite} | {s['eval_id']} | {s['agent']} | {s['model']} | {fig['n']} | {shares} | "
            f"{fig['pass@1']:.1%} | {pk:.1%} (k={s.get('trials')}) |"
        )
    return "\n".join(lines) + "\n"
