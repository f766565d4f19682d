"""The reflection loop and the judging stage on a really sampled corpus (offline expert, real sandbox)."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass

import pytest
from rollout.corpus import build_corpus, expected

from datamind.agent import protocol
from datamind.agent.params import RolloutParams
from datamind.assets import DIRS
from datamind.judge.consistency import OfflineJudge
from datamind.judge.reflection import Round, reflect
from datamind.judge.stage import JudgeParams, judge_shard, judged_dir, plan_judging
from datamind.judge.verdict import judge_answers
from datamind.rollout.stage import plan_sampling, sample_shard
from datamind.schemas import DATASET, REJECTIONS, TRAJECTORIES
from datamind.shards import read_rows
from datamind.storage import DataRoot


@dataclass
class Cand:
    final_answer: str | None


def test_reflection_loop_feeds_the_critique_and_stops_when_consistent():
    judge = OfflineJudge()
    seen = []

    async def revise(r, previous, verdict):
        seen.append((r, [c.final_answer for c in previous], verdict.reasoning))
        # Round 1 still disagrees, round 2 agrees.
        return [Cand("10"), Cand("11"), Cand("10")] if r == 1 else [Cand("10"), Cand("10.1"), Cand("10")]

    async def main(max_rounds):
        first_c = [Cand("10"), Cand("20"), Cand(None)]
        v0 = await judge_answers(judge, "q", [c.final_answer for c in first_c])
        return await reflect("q", Round(0, first_c, v0), judge=judge, revise=revise, max_rounds=max_rounds)

    rounds = asyncio.run(main(3))
    assert [r.round for r in rounds] == [1, 2]
    assert [r.verdict.consistent for r in rounds] == [False, True]
    assert seen[0][1] == ["10", "20", None]  # round 1 sees round 0's answers
    assert "no final answer" in seen[0][2]  # and round 0's critique
    assert seen[1][1] == ["10", "11", "10"] and "11" in seen[1][2]
    seen.clear()
    assert [r.round for r in asyncio.run(main(1))] == [1]  # budget respected even when still inconsistent
    assert len(seen) == 1


@pytest.fixture(scope="module")
def sampled_dir(sandbox, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("judge")
    root = DataRoot(str(tmp / "data"))
    build_corpus(root, str(tmp))
    for spec in plan_sampling(root, 10, RolloutParams()):
        sample_shard(root, spec, RolloutParams(), "run-1", sandbox=sandbox)
    return tmp


@pytest.fixture
def sampled(sampled_dir, tmp_path):
    """A private copy of the sampled data root, so each test can judge it with its own settings."""
    shutil.copytree(sampled_dir, tmp_path / "copy")
    return DataRoot(str(tmp_path / "copy" / "data"))


def _judge(root, sandbox, **form):
    params = JudgeParams(**form)
    return [judge_shard(root, s, params, "run-1", sandbox=sandbox) for s in plan_judging(root, 10, params)]


def test_con_select_with_reflection_rescues_the_inconsistent_query(sampled, sandbox):
    exp = expected()
    summary = _judge(sampled, sandbox)[0]
    assert summary["n_consistent_round0"] == 4  # q1, q2, q4, q6 (q3 has a buggy variant, q5 a single sample)
    assert summary["n_rescued_by_reflection"] == 1
    judged = {r["query_id"]: r for r in read_rows(sampled, DATASET, DIRS["judged"])}
    assert set(judged) == {"q1", "q2", "q3", "q4", "q6"}
    for q in ("q1", "q2", "q4", "q6"):
        assert judged[q]["final_answer"] == exp[q] and judged[q]["reflection_round"] == 0
        assert judged[q]["judge_verdict"] == "yes" and judged[q]["selection_strategy"] == "con_select"
        assert judged[q]["reference_answer"] == exp[q]
    q3 = judged["q3"]
    assert q3["reflection_round"] == 1 and q3["final_answer"] == exp["q3"]
    # every sample says who wrote it: the offline expert its trajectory, the offline engine its question
    assert {(r["model"], r["question_model"]) for r in judged.values()} == {("offline-expert", "offline")}
    # Reflected trajectories are stored with their round; the buggy sample revised its answer after a cross-check.
    refl = sorted(
        (r for r in read_rows(sampled, TRAJECTORIES, DIRS["trajectories"]) if r["reflection_round"] == 1),
        key=lambda r: r["sample_index"],
    )
    assert [r["query_id"] for r in refl] == ["q3"] * 3
    assert [r["final_answer"] for r in refl] == [exp["q3"]] * 3
    # Only samples whose program is not the reference get a cross-check turn against it.
    assert [r["policy"].endswith(":cross-check") for r in refl] == [False, True, True]
    buggy = refl[1]
    outputs = [protocol.interpreter_body(m["content"]).strip() for m in buggy["messages"] if m["role"] == "tool"]
    assert outputs[-2:] == [exp["q3_buggy"], exp["q3"]]
    assert "reviewer" not in buggy["messages"][1]["content"]  # the stored task is the plain question
    rej = read_rows(sampled, REJECTIONS, "rejections/judge")
    codes = {(r["query_id"], r["reason_code"]) for r in rej}
    assert ("q3", "inconsistent") in codes and ("q5", "too_few_samples") in codes
    assert sum(1 for r in rej if r["query_id"] == "q1" and r["reason_code"] == "not_selected") == 2
    # Every trajectory is accounted for: kept in judged, or rejected with a reason under its own id.
    all_ids = {r["trajectory_id"] for r in read_rows(sampled, TRAJECTORIES, DIRS["trajectories"])}
    kept_ids = {r["trajectory_id"] for r in judged.values()}
    rejected_ids = {r["item_id"] for r in rej}
    assert all_ids == kept_ids | rejected_ids and not kept_ids & rejected_ids
    assert plan_judging(sampled, 10, JudgeParams()) == []  # nothing left to judge


def test_without_reflection_the_inconsistent_query_is_dropped(sampled, sandbox):
    _judge(sampled, sandbox, reflection_rounds=0)
    judged = {r["query_id"] for r in read_rows(sampled, DATASET, DIRS["judged"])}
    assert judged == {"q1", "q2", "q4", "q6"}


def test_strategies_run_side_by_side_in_their_own_partitions(sampled, sandbox):
    from datamind.judge.stage import JudgeParams, judged_dir
    from datamind.publish.stage import publish_dataset

    exp = expected()
    non_select = {"strategy": "non_select", "reflection_rounds": 0}
    non_con = {"strategy": "non_con"}
    _judge(sampled, sandbox, **non_select)
    _judge(sampled, sandbox, **non_con)
    rows = read_rows(sampled, DATASET, judged_dir(JudgeParams(**non_select)))
    assert sorted(r["query_id"] for r in rows) == ["q1"] * 3 + ["q2"] * 3 + ["q4"] * 3 + ["q6"] * 3
    rows = read_rows(sampled, DATASET, judged_dir(JudgeParams(**non_con)))
    q3 = sorted(r["final_answer"] for r in rows if r["query_id"] == "q3")
    assert q3 == sorted([exp["q3"], exp["q3"], exp["q3_buggy"]])  # no consistency filter, no reflection
    assert {r["judge_verdict"] for r in rows if r["query_id"] == "q3"} == {"no"}
    assert sum(1 for r in rows if r["query_id"] == "q5") == 1
    # Publishing must say which judging configuration it releases.
    with pytest.raises(ValueError, match="several judged partitions"):
        publish_dataset(sampled, "run-1")
    m = publish_dataset(sampled, "run-1", judged_partition=JudgeParams(**non_con).partition)
    assert m["judge_params"]["strategy"] == "non_con" and m["by_strategy"] == {"non_con": 16}
    assert m["n_samples"] == 16 and m["n_filtered"] == 0


def test_random_select_keeps_one_per_consistent_query(sampled, sandbox):
    _judge(sampled, sandbox, strategy="random_select", reflection_rounds=0)
    rows = read_rows(sampled, DATASET, DIRS["judged"])
    assert sorted(r["query_id"] for r in rows) == ["q1", "q2", "q4", "q6"]


def test_a_sample_names_its_writers_even_where_a_row_recorded_no_model():
    from datamind.judge.stage import question_writer, trajectory_writer

    assert trajectory_writer({"model": "qwen2.5-coder-0.5b-instruct", "policy": "llm:expert:t=0.7"}) == (
        "qwen2.5-coder-0.5b-instruct"
    )
    assert trajectory_writer({"model": None, "policy": "reference"}) == "offline-expert"
    assert trajectory_writer({"model": None, "policy": "llm:expert:t=0.7:sample=0"}) == "llm"  # never null
    assert question_writer({"backend": "offline", "model": None}) == "offline"
    assert question_writer({"backend": "llm", "model": "qwen2.5-coder-1.5b-instruct"}) == "qwen2.5-coder-1.5b-instruct"


def test_judge_params_from_flat_dag_params():
    dag = {
        "backend": "llm",
        "n_samples": 4,
        "max_turns": 8,
        "temperature": 0.7,
        "top_p": 1.0,
        "shard_size": 50,
        "concurrency": 4,
        "llm_conn_id": "datamind_llm",
        "strategy": "non_select",
    }
    p = JudgeParams.from_form(dag)
    assert p.rollout == {"backend": "llm", "n_samples": 4, "max_turns": 8, "temperature": 0.7, "top_p": 1.0}
    assert (p.shard_size, p.concurrency, p.strategy, p.judge) == (50, 4, "non_select", "llm")
    assert JudgeParams.from_form({"judge_backend": "offline", **dag}).judge == "offline"
    # An unset judge backend and the explicit same one are the same configuration (same partition).
    assert JudgeParams().partition == JudgeParams(judge_backend="offline").partition
    assert JudgeParams(strategy="non_con").partition != JudgeParams().partition
    assert JudgeParams(concurrency=1).partition == JudgeParams(concurrency=9).partition


def test_judge_params_validation():
    with pytest.raises(ValueError):
        JudgeParams(strategy="best")
    with pytest.raises(ValueError, match="unknown JudgeParams parameter"):
        JudgeParams.from_form({"rounds": 2})
    with pytest.raises(ValueError):
        JudgeParams(rollout={"backend": "nope"})


def test_a_shard_killed_between_its_writes_is_judged_again_and_nothing_is_lost(sampled, sandbox, monkeypatch):
    """judged/ is written before rejections/: a crash between the two used to leave the shard counted as done
    (its queries were in judged/) with its rejection rows lost for good."""
    import datamind.judge.stage as js

    real = js.write_shard

    def crash_on_rejections(root, schema, rel_dir, rows, name):
        if schema is REJECTIONS:
            raise SystemExit("killed between the judged and the rejections write")
        return real(root, schema, rel_dir, rows, name)

    monkeypatch.setattr(js, "write_shard", crash_on_rejections)
    with pytest.raises(SystemExit):
        _judge(sampled, sandbox)
    assert read_rows(sampled, DATASET, DIRS["judged"])  # the first write landed ...
    assert {q for s in plan_judging(sampled, 10, JudgeParams()) for q in s["query_ids"]} == {
        f"q{i}" for i in range(1, 7)
    }
    monkeypatch.setattr(js, "write_shard", real)  # ... yet every query is planned again, and the rerun completes
    _judge(sampled, sandbox)
    assert plan_judging(sampled, 10, JudgeParams()) == []
    judged = read_rows(sampled, DATASET, DIRS["judged"])
    assert sorted(r["query_id"] for r in judged) == ["q1", "q2", "q3", "q4", "q6"]  # no duplicates
    rej = read_rows(sampled, REJECTIONS, "rejections/judge")
    assert ("q5", "too_few_samples") in {(r["query_id"], r["reason_code"]) for r in rej}
    assert len({r["item_id"] for r in rej}) == len(rej)


def test_the_judge_takes_n_from_the_trajectories_it_judges(sandbox, tmp_path):
    """Sampled with n_samples=2 and judged with the form's defaults: the judge reads N from what it judges.
    It used to take N from its own default RolloutParams (3) and reject every query as too_few_samples."""
    root = DataRoot(str(tmp_path / "data"))
    build_corpus(root, str(tmp_path))
    for spec in plan_sampling(root, 10, RolloutParams(n_samples=2)):
        sample_shard(root, spec, RolloutParams(n_samples=2), "run-1", sandbox=sandbox)
    _judge(root, sandbox, reflection_rounds=0)
    judged = {r["query_id"] for r in read_rows(root, DATASET, DIRS["judged"])}
    assert {"q1", "q2", "q4", "q6"} <= judged  # the queries whose two samples agree
    too_few = {r["query_id"] for r in read_rows(root, REJECTIONS, "rejections/judge")
               if r["reason_code"] == "too_few_samples"}  # fmt: skip
    assert too_few == {"q5"}  # the offline expert has one program for q5: one trajectory of the two
    # A minimum the form names still wins over the input's N.
    strict = {"reflection_rounds": 0, "min_samples": 3}
    _judge(root, sandbox, **strict)
    assert not read_rows(root, DATASET, judged_dir(JudgeParams(**strict)))
    too_few = {r["query_id"] for r in read_rows(root, REJECTIONS, "rejections/judge")
               if r["reason_code"] == "too_few_samples"}  # fmt: skip
    assert {"q1", "q2", "q4", "q6"} <= too_few
