"""The LLM path end to end: expert sampling, LLM judge, reflection and publishing against a local
OpenAI-compatible HTTP server (the real ``openai`` client over TCP) and the real sandbox."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fakes.openai_server import count_words
from rollout.corpus import build_corpus, expected, queries

from datamind.agent import protocol
from datamind.agent.params import RolloutParams
from datamind.assets import DIRS
from datamind.judge.params import JudgeParams
from datamind.judge.stage import judge_shard, plan_judging
from datamind.llm import LLMClient, LLMConfig, ResponseCache
from datamind.publish.stage import publish_dataset
from datamind.rollout.stage import plan_sampling, sample_shard
from datamind.schemas import DATASET, REJECTIONS, TRAJECTORIES
from datamind.shards import read_rows

EXP = expected()
ROLLOUT_FORM = {"backend": "llm", "n_samples": 3, "max_turns": 5}
ROLLOUT = RolloutParams.from_form(ROLLOUT_FORM)


def fake_models(body: dict) -> str:
    """Stands in for the hosted expert and judge: replies depend only on the request content."""
    msgs = body["messages"]
    if body["model"] == "judge-model":
        prompt = msgs[-1]["content"]
        answers = re.findall(r"# Answer \d+\n(.*?)\n", prompt)
        ok = answers and all(EXP["q1"] in a or EXP["q3"] in a for a in answers)
        verdict = "yes" if ok else "no"
        return (
            f"<reasoning>Checked {len(answers)} answers; the South figure must be a mean, not a maximum."
            f"</reasoning>\n<correct>{verdict}</correct>\n<number>{2 if ok else 1}</number>"
        )
    task = msgs[1]["content"]
    n_assistant = sum(m["role"] == "assistant" for m in msgs)
    if n_assistant == 0:
        # Runs on past its code block with an invented interpreter reply: the agent must clip it.
        return (
            "<think>Load the file first.</think>\n<code>\n```python\nimport pandas as pd\n"
            "df = pd.read_csv('sales.csv')\nprint(df.shape)\n```\n</code>\n<interpreter>(99, 9)</interpreter>"
        )
    if n_assistant == 1:
        if "North" in task:
            code = "print(int(df.loc[df['region'] == 'North', 'units'].sum()))"
        elif "reviewer" in task:  # reflection: the critique made the agent use the mean
            code = "print(f\"{df.loc[df['region'] == 'South', 'price'].mean():.2f}\")"
        else:
            code = "print(f\"{df.loc[df['region'] == 'South', 'price'].max():.2f}\")"
        return f"<think>Filter the region and aggregate.</think>\n<code>\n{code}\n"  # closing tag eaten by a stop
    value = msgs[-1]["content"].replace("<interpreter>", "").replace("</interpreter>", "").strip()
    return f"<think>The output answers the question.</think>\n<answer>The result is {value}.</answer>"


def test_llm_sampling_judging_reflection_and_publishing(root, tmp_path, server, llm_client, sandbox, monkeypatch):
    server.responder = fake_models
    by_id = {q["query_id"]: q for q in queries()}
    build_corpus(root, str(tmp_path), [by_id["q1"], by_id["q3"]])

    specs = plan_sampling(root, 10, ROLLOUT)
    s = sample_shard(root, specs[0], ROLLOUT, "run-llm", llm_client=llm_client, sandbox=sandbox)
    assert (s["n_trajectories"], s["n_answered"], s["n_void_turns"]) == (6, 6, 0)
    trajs = read_rows(root, TRAJECTORIES, DIRS["trajectories"])
    q1 = [t for t in trajs if t["query_id"] == "q1"]
    assert {t["final_answer"] for t in q1} == {f"The result is {EXP['q1']}."}
    first_tool = protocol.interpreter_body(q1[0]["messages"][3]["content"])
    assert first_tool.strip() == "(30, 4)"  # the sandbox's output, not the model's invented one
    assert all(t["model"] == "expert-model" and t["prompt_tokens"] > 0 for t in trajs)
    expert_calls = [b for b in server.bodies if b["model"] == "expert-model"]
    assert {(b["temperature"], b["top_p"]) for b in expert_calls} == {(0.7, 0.95)}
    assert all("</code>" in b["stop"] for b in expert_calls)
    assert all(m["role"] in ("system", "user", "assistant") for b in expert_calls for m in b["messages"])

    # the judge's own rollout settings differ: reflection must still resample as round 0 did
    judge_params = JudgeParams(judge_backend="llm", rollout={**ROLLOUT_FORM, "top_p": 0.5}, reflection_rounds=2)
    jspecs = plan_judging(root, 10, judge_params)
    j = judge_shard(root, jspecs[0], judge_params, "run-llm", llm_client=llm_client, sandbox=sandbox)
    assert (j["n_consistent_round0"], j["n_rescued_by_reflection"], j["n_judged_samples"]) == (1, 1, 2)
    judged = {r["query_id"]: r for r in read_rows(root, DATASET, DIRS["judged"])}
    # q1's three answers are equal and its executed reference confirms them: the judge model was never asked
    # about it. q3's equal answers contradict their reference, so the model judged them and reflection ran; the
    # reflected answers agree with each other and with the reference, so that round needed no call either.
    judge_prompts = [b["messages"][-1]["content"] for b in server.bodies if b["model"] == "judge-model"]
    assert judge_prompts and not any(by_id["q1"]["question"] in t for t in judge_prompts)
    assert sum(by_id["q3"]["question"] in t for t in judge_prompts) == 1
    assert judged["q1"]["judge_verdict"] == "yes" and "LLM judge was not asked" in judged["q1"]["judge_reasoning"]
    assert judged["q3"]["reflection_round"] == 1 and EXP["q3"] in judged["q3"]["final_answer"]
    # the served model wrote the trajectories (a reflected one too), the offline engine the questions: both said
    assert {(r["model"], r["question_model"]) for r in judged.values()} == {("expert-model", "offline")}
    versions = json.loads(judged["q3"]["template_versions"])
    assert versions["judge"].startswith("consistency@") and versions["reflect"].startswith("reflect@")
    # The critique reached the expert during reflection, but the stored conversation is the plain task.
    reflect_calls = [
        b for b in server.bodies if b["model"] == "expert-model" and "reviewer" in b["messages"][1]["content"]
    ]
    assert reflect_calls and "must be a mean, not a maximum" in reflect_calls[0]["messages"][1]["content"]
    # ... together with what the earlier attempts did (their code and what it printed), not only their answers
    shown = reflect_calls[0]["messages"][1]["content"]
    assert shown.count("Step 2 code:\nprint(f\"{df.loc[df['region'] == 'South', 'price'].max():.2f}\")") == 3
    assert "Step 1 code:\nimport pandas as pd\ndf = pd.read_csv('sales.csv')" in shown
    assert "(99, 9)" not in shown  # the invented interpreter reply was clipped, never shown as an output
    assert shown.count("## Attempt ") == 3 and shown.count(" above was your own.") == 1
    # the N reflected attempts read one note that differs only at its end, so a prefix cache evaluates it once
    notes = {b["messages"][1]["content"] for b in reflect_calls}
    assert len(notes) == 3 and len({n.rsplit("\n", 1)[0] for n in notes}) == 1, "the notes differ before their end"
    assert {(b["temperature"], b["top_p"]) for b in reflect_calls} == {(0.7, 0.95)}  # as round 0, not 0.5
    reflected = [t for t in read_rows(root, TRAJECTORIES, DIRS["trajectories"]) if t["reflection_round"] == 1]
    assert reflected and {json.loads(t["sampling_params"])["max_turns"] for t in reflected} == {5}
    assert "reviewer" not in judged["q3"]["messages"][1]["content"]

    calls_before = server.request_count
    monkeypatch.setenv("DATAMIND_LLM_PRICES", json.dumps({"expert-model": {"prompt": 2.0, "completion": 8.0}}))
    m = publish_dataset(root, "run-llm", shard_rows=10)
    assert m["n_filtered"] == 0, m["filtered_by_reason"]
    assert m["n_samples"] == 2 and m["by_category"] == {"aggregation": 1, "comparison": 1}
    assert m["audit"]["samples_per_model"] == {"expert-model": 2}
    assert m["audit"]["samples_per_writers"] == {"expert-model": {"offline": 2}}
    # What each sample cost: every expert call made for its question (its three trajectories, and q3's
    # reflection), as the server billed them (words in, words out); judge calls are in no row yet.
    billed = {"q1": [0, 0], "q3": [0, 0]}
    for b in server.bodies:
        if b["model"] == "expert-model":
            qid = next(q for q in billed if by_id[q]["question"] in b["messages"][1]["content"])
            billed[qid][0] += sum(count_words(x["content"]) for x in b["messages"])
            billed[qid][1] += count_words(fake_models(b))
    cost = m["cost"]
    for qid in billed:
        cell = cost["by_category_hop"][f"{by_id[qid]['category']} / hop {by_id[qid]['hop']}"]
        assert cell["paid_tokens_per_sample"] == sum(billed[qid]) and cell["cached_tokens_per_sample"] == 0
        assert cell["usd_per_sample"] == round((billed[qid][0] * 2.0 + billed[qid][1] * 8.0) / 1e6, 6)
    assert cost["priced"] and "LLM cost per accepted sample" in root.read_text("dataset/v1/README.md")
    # A rerun of the sampling shard is answered from the response cache: no new LLM calls, same rows, and
    # its trajectories now say their tokens were the cache's.
    again = sample_shard(root, specs[0], ROLLOUT, "run-llm-2", llm_client=llm_client, sandbox=sandbox)
    assert server.request_count == calls_before and again["path"] == s["path"]
    cached = [t for t in read_rows(root, TRAJECTORIES, DIRS["trajectories"]) if t["reflection_round"] == 0]
    assert all(t["cached_prompt_tokens"] == t["prompt_tokens"] > 0 for t in cached)


def test_unparseable_judge_replies_become_a_recorded_rejection(root, tmp_path, server, llm_client, sandbox):
    from datamind.schemas import REJECTIONS

    server.responder = lambda body: "They all look the same to me."  # never the required tags
    build_corpus(root, str(tmp_path), [queries()[0]])
    for spec in plan_sampling(root, 10, RolloutParams()):
        sample_shard(root, spec, RolloutParams(), "run", sandbox=sandbox)
    params = JudgeParams(judge_backend="llm", agree_by_rule=False)  # the offline answers agree: ask anyway
    summary = judge_shard(
        root, plan_judging(root, 10, params)[0], params, "run", llm_client=llm_client, sandbox=sandbox
    )
    assert summary["n_judged_samples"] == 0
    assert server.request_count == 3  # first try + 2 bounded re-asks
    rej = [r for r in read_rows(root, REJECTIONS, "rejections/judge") if r["query_id"] == "q1"]
    assert [(r["item_id"], r["reason_code"]) for r in rej] == [("q1", "judge_parse_failed")]
    assert rej[0]["raw"] == "They all look the same to me."
    assert plan_judging(root, 10, params) == []


def test_a_cut_reply_never_becomes_the_final_answer(server, llm_client):
    import asyncio

    import pytest

    from datamind.agent.loop import PolicyGaveUp
    from datamind.agent.policies.llm_expert import LLMExpertPolicy

    server.responder = lambda body: "<think>done</think>\n<answer>The result is 1080</answer>"
    policy = LLMExpertPolicy(llm_client, params={"max_tokens": 3}, sample_index=0, template_version="t")

    async def turn():
        try:
            return await policy.next_turn([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], None)
        finally:
            await llm_client.aclose()

    with pytest.raises(PolicyGaveUp) as err:
        asyncio.run(turn())
    assert err.value.code == "reply_truncated"


def test_judge_defaults_handle_llm_sampled_trajectories_without_losing_them(
    root, tmp_path, server, llm_client, sandbox
):
    """The judge DAG's defaults (offline judge, no LLM connection) after an LLM sampling run: consistent
    queries are judged as usual; an inconsistent one cannot be reflected here and says why, by name."""
    turns = iter(range(10_000))

    def split_answers(body: dict) -> str:
        reply = fake_models(body)
        if "South" in body["messages"][1]["content"] and reply.startswith("<think>The output"):
            return f"<think>The output answers the question.</think>\n<answer>The result is {next(turns)}.</answer>"
        return reply

    server.responder = split_answers
    by_id = {q["query_id"]: q for q in queries()}
    build_corpus(root, str(tmp_path), [by_id["q1"], by_id["q3"]])
    for spec in plan_sampling(root, 10, ROLLOUT):
        sample_shard(root, spec, ROLLOUT, "run-llm", llm_client=llm_client, sandbox=sandbox)
    calls = server.request_count
    for spec in plan_judging(root, 10, JudgeParams()):
        judge_shard(root, spec, JudgeParams(), "run-judge")  # no llm_client: the defaults
    assert server.request_count == calls
    judged = read_rows(root, DATASET, DIRS["judged"])
    assert {r["query_id"] for r in judged} == {"q1"}
    from datamind.judge.stage import rejections_dir
    from datamind.schemas import REJECTIONS

    rej = [r for r in read_rows(root, REJECTIONS, rejections_dir(JudgeParams())) if r["query_id"] == "q3"]
    assert len(rej) == 3 and {r["reason_code"] for r in rej} == {"inconsistent"}
    assert all("not reflected: sampled by an LLM" in r["reason"] for r in rej)


def test_judging_in_batch_mode_keeps_the_online_verdicts_row_for_row(tmp_path, server, sandbox):
    """The model-as-judge through the Batch API: the judged rows and rejections of the online run, from the
    same requests (a reflection round's second verdict waits for the first)."""
    from fakes.batch_shard import comparable_rows

    from datamind.llm.batch import run_batched
    from datamind.storage import DataRoot

    server.responder = fake_models
    # every verdict from the model (agreeing answers too), so the reflection round's verdict waits for round 0's
    params = JudgeParams(judge_backend="llm", reflection_rounds=1, agree_by_rule=False)

    def client(root):
        cfg = LLMConfig(base_url=server.base_url, api_key="sk-test", models={"judge": "judge-model"}, max_retries=0)
        return LLMClient(cfg, cache=ResponseCache(root))

    def sampled(name):
        root = DataRoot(str(tmp_path / name / "data"))
        build_corpus(root, str(tmp_path / name))
        for spec in plan_sampling(root, 10, RolloutParams()):
            sample_shard(root, spec, RolloutParams(), "run", sandbox=sandbox)
        return root

    def rows_of(root):
        # each run stages its own copy of the data file: rows name it under their own folder
        rows = comparable_rows(root, ((DIRS["judged"], DATASET), ("rejections/judge", REJECTIONS)))
        home = str(Path(root.root).parent)
        return {k: [r.replace(home, "<run>") for r in v] for k, v in rows.items()}

    online, batched = sampled("online"), sampled("batch")
    (spec,) = plan_judging(online, 10, params)
    (batch_spec,) = plan_judging(batched, 10, params)  # its hints name the batch run's own files
    judge_shard(online, spec, params, "run", llm_client=client(online), sandbox=sandbox)
    asked_online = server.request_count
    server.reset()
    server.responder = fake_models
    summary = run_batched(
        lambda r, c: judge_shard(r, batch_spec, params, "run", llm_client=c, sandbox=sandbox), batched,
        client(batched), batch_spec["shard_id"], poll_s=0.01,
    )  # fmt: skip
    assert server.request_count == 0 and asked_online > 0
    assert rows_of(batched) == rows_of(online) and rows_of(online)[DIRS["judged"]]
    assert sum(b["requests"] for b in summary["batches"]) == len(server.batch_bodies) == asked_online
    assert len(summary["batches"]) == 2  # round 0's verdicts, then the reflection round's
