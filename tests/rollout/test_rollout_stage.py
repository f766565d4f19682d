"""The sampling stage on a real corpus with the offline expert policy and a real sandbox."""

from __future__ import annotations

import os

import pytest
from rollout.corpus import build_corpus, expected, queries

from datamind.agent import protocol
from datamind.agent.params import RolloutParams
from datamind.assets import DIRS
from datamind.rollout.stage import plan_sampling, sample_shard, sampling_state
from datamind.schemas import REJECTIONS, TRAJECTORIES
from datamind.shards import read_rows


def _by_query(root):
    out: dict[str, list[dict]] = {}
    for r in read_rows(root, TRAJECTORIES, DIRS["trajectories"]):
        out.setdefault(r["query_id"], []).append(r)
    return {q: sorted(v, key=lambda r: r["sample_index"]) for q, v in out.items()}


@pytest.fixture(scope="module")
def sampled(sandbox, tmp_path_factory):
    """Sampled once for the module: the tests below only read it (the rerun test rewrites identical bytes)."""
    from datamind.storage import DataRoot

    tmp = tmp_path_factory.mktemp("sampled")
    root = DataRoot(str(tmp / "data"))
    build_corpus(root, str(tmp))
    specs = plan_sampling(root, 10, RolloutParams())
    summaries = [sample_shard(root, s, RolloutParams(), "run-1", sandbox=sandbox) for s in specs]
    return root, specs, summaries


def test_offline_trajectories_are_real_multi_turn_runs(sampled):
    root, specs, summaries = sampled
    assert [s["query_ids"] for s in specs] == [["q1", "q2", "q3", "q4", "q5", "q6"]]
    exp = expected()
    trajs = _by_query(root)
    # N = 3 distinct programs -> 3 trajectories; q5 has a single program -> 1 trajectory, recorded as such.
    assert {q: len(v) for q, v in trajs.items()} == {"q1": 3, "q2": 3, "q3": 3, "q4": 3, "q5": 1, "q6": 3}
    assert summaries[0]["n_queries_fewer_variants"] == 1
    for q in ("q1", "q2", "q4", "q6"):
        assert [t["final_answer"] for t in trajs[q]] == [exp[q]] * 3, q
        assert all(t["status"] == "answered" for t in trajs[q])
    # The buggy variant really ran and really disagrees: self-consistency is not a tautology.
    assert [t["final_answer"] for t in trajs["q3"]] == [exp["q3"], exp["q3_buggy"], exp["q3"]]
    # Each sample used a different formulation.
    assert len({t["policy"] for t in trajs["q1"]}) == 3
    assert {p.split(":")[2] for p in (t["policy"] for t in trajs["q1"])} == {"pandas", "numpy", "stdlib"}


def test_chain_hops_are_turns_with_real_interpreter_output(sampled):
    root, _, _ = sampled
    exp = expected()
    t = _by_query(root)["q2"][0]  # hop 2: inspect, hop-1 program, hop-2 program, answer
    roles = [m["role"] for m in t["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"]
    assert t["n_turns"] == 4 and t["n_void_turns"] == 0
    outputs = [protocol.interpreter_body(m["content"]) for m in t["messages"] if m["role"] == "tool"]
    assert "shape: (30, 4)" in outputs[0]
    assert outputs[1].strip() == exp["q1"]  # hop 1's own answer, printed by its program in the sandbox
    assert outputs[2].strip() == exp["q2"]
    assert "What percentage" in t["messages"][1]["content"]
    system = t["messages"][0]["content"]
    assert "Multi-hop Numerical Reasoning" not in system and "sales.csv" in system  # no category in a sample


def test_sql_queries_run_through_the_sql_tools(sampled):
    root, _, _ = sampled
    q4 = _by_query(root)["q4"]
    first_tool = protocol.interpreter_body(q4[0]["messages"][3]["content"])
    assert "orders" in first_tool  # get_db_info() output
    assert "execute_sql" in q4[0]["messages"][4]["content"]
    # Two SQL formulations and one that loads the SQL result into pandas.
    assert [t["policy"].split(":")[2] for t in q4] == ["sql-tool", "sql-tool", "sql-tool+pandas"]


def test_xlsx_sheet_is_inspected_and_absolute_paths_point_at_the_session_copy(sampled):
    root, _, _ = sampled
    q6 = _by_query(root)["q6"]
    inspect = q6[0]["messages"][2]["content"]
    assert "pd.read_excel('budget.xlsx', sheet_name='data', engine='calamine')" in inspect  # no engine warning
    assert "shape: (24, 2)" in protocol.interpreter_body(q6[0]["messages"][3]["content"])
    code = q6[0]["messages"][4]["content"]
    assert "DATA_PATH = 'budget.xlsx'" in code and "/staged/" not in code


def test_plan_skips_sampled_queries_and_rerun_rewrites_the_same_shard(sampled, sandbox):
    root, specs, summaries = sampled
    assert plan_sampling(root, 10, RolloutParams()) == []
    before = sorted(os.listdir(root.path(DIRS["trajectories"])))
    ids_before = sorted(r["trajectory_id"] for r in read_rows(root, TRAJECTORIES, DIRS["trajectories"]))
    again = sample_shard(root, specs[0], RolloutParams(), "run-2", sandbox=sandbox)
    assert again["path"] == summaries[0]["path"]
    assert sorted(os.listdir(root.path(DIRS["trajectories"]))) == before
    assert sorted(r["trajectory_id"] for r in read_rows(root, TRAJECTORIES, DIRS["trajectories"])) == ids_before


def test_queries_that_cannot_run_are_rejected_with_a_reason(root, tmp_path, sandbox):
    from rollout.corpus import build_corpus, queries

    rows = queries()[:1]
    orphan = dict(rows[0], query_id="q_orphan", hop=2, parent_query_ids=["missing"], root_query_id="missing")
    nofile = dict(rows[0], query_id="q_nofile", table_id="t_none", file_id="f_none")
    build_corpus(root, str(tmp_path), [rows[0], orphan, nofile])
    specs = plan_sampling(root, 10, RolloutParams())
    summary = sample_shard(root, specs[0], RolloutParams(), "run-1", sandbox=sandbox)
    assert summary["n_rejected_queries"] == 2
    rej = {r["query_id"]: r["reason_code"] for r in read_rows(root, REJECTIONS, "rejections/rollout")}
    assert rej == {"q_orphan": "missing_parent", "q_nofile": "no_data_file"}
    assert plan_sampling(root, 10, RolloutParams()) == []  # rejected queries are not planned again


def test_params_validate_and_round_trip():
    p = RolloutParams.from_form({"n_samples": 4, "temperature": 0.5})
    assert RolloutParams.from_form(p.to_dict()) == p
    with pytest.raises(ValueError, match="unknown RolloutParams parameter"):
        RolloutParams.from_form({"n_sample": 3})
    # The sampling DAG's params pass through as they are (the connection id is the orchestrator's business).
    dag = {
        "backend": "llm",
        "n_samples": 3,
        "max_turns": 8,
        "temperature": 0.7,
        "top_p": 1.0,
        "shard_size": 50,
        "concurrency": 4,
        "llm_conn_id": "datamind_llm",
    }
    assert RolloutParams.from_form(dag).sampling() == {"temperature": 0.7, "top_p": 1.0, "max_tokens": 2048}
    with pytest.raises(ValueError):
        RolloutParams(backend="gpu")
    # Sampling settings do not change an offline replay's identity, but do change an LLM one's.
    assert RolloutParams(temperature=0.1).fingerprint == RolloutParams(temperature=0.9).fingerprint
    assert (
        RolloutParams(backend="llm", temperature=0.1).fingerprint
        != RolloutParams(backend="llm", temperature=0.9).fingerprint
    )


@pytest.fixture()
def starved_sandbox():
    """A real sandbox whose cells cannot be set up: one process per session cannot hold the pid-namespace
    chain (outside, init, cell), so every cell dies before it is ready, as on a host out of processes."""
    from datamind.sandbox import Sandbox, SandboxLimits

    with Sandbox(SandboxLimits(isolation_mode="userns", max_procs=1)) as sb:
        if not {"pid_namespace", "pids_cgroup"} <= set(sb.layers):
            pytest.skip(f"needs a pid namespace and a pids cgroup to starve set-up; active: {sb.layers}")
        yield sb


def test_a_sandbox_failure_is_recorded_and_sampled_again_never_kept(root, tmp_path, sandbox, starved_sandbox):
    build_corpus(root, str(tmp_path), queries()[:1])
    params = RolloutParams(max_attempts=3)
    for spec in plan_sampling(root, 10, params):
        sample_shard(root, spec, params, "run-broken", sandbox=starved_sandbox)
    rows = read_rows(root, TRAJECTORIES, DIRS["trajectories"])
    assert rows and all(r["status"] == "error" and r["error"].startswith("sandbox_failure:") for r in rows)
    assert all("set-up failed" not in m["content"] for r in rows for m in r["messages"])  # never an observation
    state = sampling_state(root)
    assert not state.done and set(state.resample) == {queries()[0]["query_id"]}
    for spec in plan_sampling(root, 10, params):  # a later run on a healthy host finishes them
        sample_shard(root, spec, params, "run-healthy", sandbox=sandbox)
    final = sampling_state(root)
    assert final.resample == {} and final.done == {queries()[0]["query_id"]}


def test_the_offline_policy_runs_live_interpreters_and_writes_the_chunked_transcripts(sampled, sandbox, tmp_path):
    """auto mode: the offline expert answers each turn at once, so a live interpreter per trajectory costs no
    memory held while a model thinks; what a sample shows must not depend on the mode, only its speed."""
    from datamind.storage import DataRoot

    assert RolloutParams().resolved_sandbox_mode == "live"
    assert RolloutParams(backend="llm").resolved_sandbox_mode == "chunked"  # a model's turns take seconds
    assert RolloutParams(sandbox_mode="chunked").fingerprint != RolloutParams().fingerprint
    live_root, specs, _ = sampled  # sampled with the defaults: live sessions
    chunked = DataRoot(str(tmp_path / "data"))
    build_corpus(chunked, str(tmp_path))
    sample_shard(chunked, specs[0], RolloutParams(sandbox_mode="chunked"), "run-chunked", sandbox=sandbox)

    def transcripts(root):
        return {
            (q, t["sample_index"]): (t["messages"], t["final_answer"], t["status"], t["n_void_turns"])
            for q, ts in _by_query(root).items()
            for t in ts
        }

    live, replayed = transcripts(live_root), transcripts(chunked)
    assert len(live) == 16 and live == replayed
    ids = {r["trajectory_id"] for r in read_rows(live_root, TRAJECTORIES, DIRS["trajectories"])}
    assert ids.isdisjoint(r["trajectory_id"] for r in read_rows(chunked, TRAJECTORIES, DIRS["trajectories"]))
