"""The LLM backend end to end against a real OpenAI-protocol server on 127.0.0.1 (tests/fakes)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

import pytest
from fakes.openai_server import Fault
from synth_fixtures import catalog_rows, write_catalog

from datamind import categories
from datamind.llm import EndpointUnavailable, LLMClient, LLMConfig, ResponseCache
from datamind.roles import parse_overrides, table_roles
from datamind.schemas import QUERIES, REJECTIONS
from datamind.shards import read_rows
from datamind.synth import prompts as P
from datamind.synth.llm_backend import grounding_context, question_rules
from datamind.synth.params import SynthParams
from datamind.synth.stage import plan_synthesis, synthesize_shard
from datamind.synth.table import load_view

CATEGORIES = ["ranking", "counting", "causal_analysis"]
FORM = {
    "backend": "llm",
    "categories": CATEGORIES,
    "queries_per_category": 2,
    "n_chains": 1,
    "min_hops": 3,
    "max_hops": 3,
}
PARAMS = SynthParams.from_form(FORM)
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


def _read_code(prompt: str) -> str:
    """The read code the prompt tells the model to start from."""
    return re.search(r"write only what comes after them:\n(.*?)\n- ", prompt, re.DOTALL).group(1)


def reply_for(prompt: str, code: str | None = None) -> str:
    """A well-formed reply whose question is a deterministic function of the prompt."""
    m = re.search(r"# Target question type\n(.+)\n", prompt) or re.search(
        r"# The new step's question type\n([^:]+):", prompt
    )
    name = m.group(1).strip()
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    words = " ".join(WORDS[int(ch, 16)] for ch in digest[:6])
    if code is None:
        previous = re.search(r"# Its result\n(.+)\n", prompt)
        # a single question sums the units (205 by hand); a chain hop adds the table's 8 rows to the length
        # of the previous hop's printed result, so each hop's answer proves which result it was given
        tail = f"print(len({previous.group(1)!r}) + len(df))" if previous else "print(int(df['units'].sum()))"
        code = tail  # only what follows the read code, as the prompt asks
    return (
        f"<question>For {name}, which {words} stands out?</question>\n"
        f"<description>Steps {digest[:8]}.</description>\n<type>{name}</type>\n<code>\n```python\n{code}\n```\n</code>"
    )


def responder(body: dict) -> str:
    prompt = body["messages"][0]["content"]
    last = body["messages"][-1]["content"]
    if "# Target question type\nCausal Analysis\n" in prompt:
        return "I cannot help with that."  # always malformed: no tags, every re-ask too
    if "# Target question type\nCounting\n" in prompt:
        return reply_for(prompt, _read_code(prompt) + "\nprint(1 / 0)")  # never runs: rejected after one repair
    if "# Target question type\nRanking\n" in prompt and len(body["messages"]) == 1:
        return reply_for(prompt, _read_code(prompt) + "\nprint(df['unit'].sum())")  # a typo, fixed when shown
    assert "Running your <code>" in last or len(body["messages"]) == 1
    return reply_for(prompt)


@pytest.fixture
def client_factory(llm_server, root):
    def make() -> LLMClient:
        config = LLMConfig(
            base_url=llm_server.base_url,
            api_key="sk-test-not-real",
            models={"synthesizer": "synth-model"},
            timeout_s=2.0,
            max_retries=3,
            backoff_base_s=0.005,
            backoff_max_s=0.02,
        )
        return LLMClient(config, cache=ResponseCache(root))

    return make


@pytest.fixture
def catalog(root, small_csv):
    rows = catalog_rows(small_csv)
    write_catalog(root, rows)
    return rows


def test_llm_backend_end_to_end_with_faults_rejections_and_cached_rerun(root, catalog, llm_server, client_factory):
    llm_server.responder = responder
    llm_server.script(None, Fault.server_error(), Fault.rate_limit())
    (spec,) = plan_synthesis(root, 10, PARAMS)
    summary = synthesize_shard(root, spec, PARAMS, "run-1", llm_client=client_factory())
    first_calls = llm_server.request_count
    assert set(llm_server.faults_served) == {"status", "rate_limit"}  # both faults were met and retried past

    rows = read_rows(root, QUERIES, "queries")
    llm_rows = [r for r in rows if r["backend"] == "llm"]
    singles = [r for r in llm_rows if r["hop"] == 1]
    # causal_analysis replies were all malformed; counting programs never ran (rejected below)
    assert Counter_of(singles) == {"ranking": 2}
    # every LLM question carries the program the model wrote and what it printed in the sandbox
    assert all(r["model"] == "synth-model" and r["solution_lang"] == "python" for r in llm_rows)
    # the model wrote only the analysis (or, where it copied the read code, both): each stored program reads
    # the file once and stands alone
    assert all(r["reference_solution"].count("pd.read_csv(DATA_PATH") == 1 for r in llm_rows)
    assert [r["reference_answer"] for r in singles] == ["205", "205"]  # sum of units, by hand

    # tokens: the fake counts words, so the first ranking prompt (rendered again here) fixes the expected numbers;
    # its first program had a typo, so the kept question cost two exchanges
    (table,) = catalog
    meta = P.meta_for_prompt(table["meta_info"])
    source, _ = load_view(root, table)
    params = PARAMS
    roles = table_roles(table, parse_overrides(params.column_roles))
    rules = grounding_context(table, *question_rules(table, source, roles), roles)
    prompt = P.render_query_prompt(meta, "ranking", 0, avoid=[], data=P.program_context(source), rules=rules)
    assert "pd.read_csv(DATA_PATH" in prompt.text and "sales.csv" in prompt.text
    bad_reply = reply_for(prompt.text, _read_code(prompt.text) + "\nprint(df['unit'].sum())")
    expected_reply = reply_for(prompt.text)
    question = re.search(r"<question>(.*)</question>", expected_reply).group(1)
    (row,) = [r for r in singles if r["question"] == question]
    repair = next(
        b["messages"]
        for b in llm_server.bodies
        if len(b["messages"]) == 3 and b["messages"][0]["content"] == prompt.text
    )
    assert repair[1]["content"] == bad_reply and "KeyError" in repair[2]["content"] and "'unit'" in repair[2]["content"]
    assert row["prompt_tokens"] == len(prompt.text.split()) + sum(len(m["content"].split()) for m in repair)
    assert row["completion_tokens"] == len(bad_reply.split()) + len(expected_reply.split())
    assert row["template_version"] == prompt.version
    # the second ranking prompt shows the first question, so the model is steered away from repeating it
    second = P.render_query_prompt(meta, "ranking", 1, avoid=[question], data=P.program_context(source), rules=rules)
    assert any(b["messages"][0]["content"] == second.text for b in llm_server.bodies)

    # chains: an executed offline root, then LLM hops; hop 2 was told the root's computed result
    (root_row,) = [r for r in rows if r["backend"] == "offline"]
    hops = sorted((r for r in llm_rows if r["hop"] > 1), key=lambda r: r["hop"])
    assert [r["hop"] for r in hops] == [2, 3]
    assert hops[0]["parent_query_ids"] == [root_row["query_id"]] and hops[1]["parent_query_ids"] == [
        hops[0]["query_id"]
    ]
    assert all(r["root_query_id"] == root_row["query_id"] for r in hops)
    compose_prompts = [
        b["messages"][0]["content"] for b in llm_server.bodies if "Previous question" in b["messages"][0]["content"]
    ]
    assert any(
        root_row["question"] in p and f"# Its result\n{root_row['reference_answer']}\n" in p for p in compose_prompts
    )
    # every hop was given the previous hop's executed result (hop 3 too, not only hop 2)
    hop2 = len(root_row["reference_answer"]) + 8
    assert [r["reference_answer"] for r in hops] == [str(hop2), str(len(str(hop2)) + 8)]
    assert any(f"# Its result\n{hop2}\n" in p and hops[0]["question"] in p for p in compose_prompts)

    rejections = read_rows(root, REJECTIONS, "rejections")
    parse_failures = [r for r in rejections if r["reason_code"] == "llm_parse_failed"]
    assert len(parse_failures) == 2 and all(r["raw"] == "I cannot help with that." for r in parse_failures)
    assert summary["rejections"]["llm_parse_failed"] == 2
    never_ran = [r for r in rejections if r["reason_code"] == "reference_failed"]
    assert len(never_ran) == 2 and all("ZeroDivisionError" in r["reason"] for r in never_ran)
    assert all("print(1 / 0)" in r["raw"] for r in never_ran)
    assert summary["llm"]["calls"] == first_calls - 2  # every request but the two faulted attempts was counted

    # rerun with the same parameters: nothing planned, nothing sent
    llm_server.reset()
    llm_server.responder = responder
    assert plan_synthesis(root, 10, PARAMS) == []
    assert synthesize_shard(root, spec, PARAMS, "run-2", llm_client=client_factory())["reused"]
    # even when the outputs are gone, the response cache answers every prompt: zero new calls, same ids
    root.remove("queries")
    root.remove("rejections")
    again = synthesize_shard(root, spec, PARAMS, "run-3", llm_client=client_factory())
    assert llm_server.request_count == 0
    assert sorted(r["query_id"] for r in read_rows(root, QUERIES, "queries")) == sorted(r["query_id"] for r in rows)
    assert again["llm"]["calls"] == 0 and again["llm"]["cached_calls"] > 0


def Counter_of(rows):
    out: dict[str, int] = {}
    for r in rows:
        out[r["category"]] = out.get(r["category"], 0) + 1
    return out


def test_a_dead_endpoint_fails_the_shard_and_leaves_it_to_be_retried(root, catalog, llm_server, client_factory):
    llm_server.responder = lambda body: Fault.http_status(401)
    (spec,) = plan_synthesis(root, 10, PARAMS)
    with pytest.raises(EndpointUnavailable):
        synthesize_shard(root, spec, PARAMS, "run-1", llm_client=client_factory())
    assert not root.exists("queries") or root.glob("queries", "**", "_commits", "*.json") == []  # no commit
    assert plan_synthesis(root, 10, PARAMS) == [spec]  # still pending
    # the key never leaks into what was written or raised
    for path in root.glob("**", "*"):
        if root.fs.isfile(path) and not path.endswith(".parquet"):
            assert "sk-test-not-real" not in root.fs.cat_file(path).decode("utf-8", "replace")


def test_bad_meta_info_is_a_rejection_not_a_crash(root, small_csv, llm_server, client_factory):
    llm_server.responder = responder
    (row,) = catalog_rows(small_csv)
    row["meta_info"] = json.dumps({"description": "x"})
    write_catalog(root, [row])
    params = SynthParams.from_form({**FORM, "n_chains": 0})
    (spec,) = plan_synthesis(root, 10, params)
    summary = synthesize_shard(root, spec, params, "r", llm_client=client_factory())
    assert summary["n_queries"] == 0 and summary["rejections"] == {"bad_meta_info": 1}
    assert llm_server.request_count == 0


def test_a_failed_hop_records_every_later_hop_it_cost(root, catalog, llm_server, client_factory):
    def broken_chains(body: dict) -> str:
        prompt = body["messages"][0]["content"]
        return "no tags at all" if "# Previous question" in prompt else responder(body)

    llm_server.responder = broken_chains
    params = SynthParams.from_form({**FORM, "categories": ["ranking"], "queries_per_category": 1})
    (spec,) = plan_synthesis(root, 10, params)
    summary = synthesize_shard(root, spec, params, "run-1", llm_client=client_factory())
    rows = read_rows(root, QUERIES, "queries")
    assert [r["hop"] for r in rows if r["hop"] > 1] == []
    rejected = read_rows(root, REJECTIONS, "rejections")
    codes = Counter(r["reason_code"] for r in rejected)
    assert codes["llm_parse_failed"] == 1 and codes["chain_hop_skipped"] == 1  # hop 2 failed, so hop 3 never asked
    skipped = next(r for r in rejected if r["reason_code"] == "chain_hop_skipped")
    assert "hop 3" in skipped["reason"] and "hop 2 failed" in skipped["reason"]
    assert summary["rejections"]["chain_hop_skipped"] == 1


# Two categories, three seed chains: the offline walk also starts chains with aggregation and statistics questions,
# and its later hops take most of the 18 categories.
TWO = ["ranking", "counting"]
NARROW = SynthParams.from_form(
    {**FORM, "categories": TWO, "queries_per_category": 1, "n_chains": 3, "min_hops": 2, "max_hops": 3}
)


def _compose_prompts(server) -> list[str]:
    return [b["messages"][0]["content"] for b in server.bodies if "# Previous question" in b["messages"][0]["content"]]


def test_llm_backend_whose_every_call_fails_leaves_no_offline_seed(root, catalog, llm_server, client_factory):
    llm_server.responder = lambda body: "<<<>>> not a reply"  # every single and every chain hop fails
    (spec,) = plan_synthesis(root, 10, NARROW)
    summary = synthesize_shard(root, spec, NARROW, "run-1", llm_client=client_factory())
    assert _compose_prompts(llm_server)  # chains were started on offline seeds ...
    assert read_rows(root, QUERIES, "queries") == [] and summary["n_queries"] == 0  # ... and none is left behind
    rejected = Counter(r["reason_code"] for r in read_rows(root, REJECTIONS, "rejections"))
    assert rejected["llm_parse_failed"] > len(TWO)  # the singles, and the hop 2 of a chain, were asked and failed


def test_a_seed_whose_chain_hops_all_fail_is_not_written(root, catalog, llm_server, client_factory):
    def chains_fail(body: dict) -> str:
        prompt = body["messages"][0]["content"]
        return "no tags at all" if "# Previous question" in prompt else reply_for(prompt)

    llm_server.responder = chains_fail
    (spec,) = plan_synthesis(root, 10, NARROW)
    synthesize_shard(root, spec, NARROW, "run-1", llm_client=client_factory())
    rows = read_rows(root, QUERIES, "queries")
    assert _compose_prompts(llm_server)  # chains were tried
    # the model's single-hop questions are kept; no chain got a hop, so no offline root stands alone
    assert sorted(r["category"] for r in rows) == sorted(TWO) and {r["backend"] for r in rows} == {"llm"}


def test_llm_chains_hold_only_requested_categories_from_their_root_on(root, catalog, llm_server, client_factory):
    llm_server.responder = lambda body: reply_for(body["messages"][0]["content"])
    (spec,) = plan_synthesis(root, 10, NARROW)
    synthesize_shard(root, spec, NARROW, "run-1", llm_client=client_factory())
    rows = read_rows(root, QUERIES, "queries")
    assert {r["category"] for r in rows} <= set(TWO)
    by_id = {r["query_id"]: r for r in rows}
    offline = [r for r in rows if r["backend"] == "offline"]
    hops = [r for r in rows if r["hop"] > 1]
    assert offline and hops  # a chain was composed on a requested root
    assert all(r["hop"] == 1 and any(h["parent_query_ids"] == [r["query_id"]] for h in hops) for r in offline)
    assert all(p in by_id for r in hops for p in r["parent_query_ids"])  # every chain replays from its root
    names = {categories.get(c).name for c in TWO}
    asked = {re.search(r"# The new step's question type\n([^:]+):", p).group(1) for p in _compose_prompts(llm_server)}
    assert asked and asked <= names


def test_llm_questions_a_database_cannot_answer_are_rejected_with_their_reason(
    root, small_sqlite, llm_server, client_factory
):
    """A name no table has, a column the question's table lacks, a key measured: each is rejected with its own
    reason and never reaches the queries; a grounded question is kept, scoped to its table."""
    asked = {
        "Ranking": "Which shop_name_total value is highest?",
        "Counting": "How many records have shop_label equal to 'Alpha'?",
        "Statistical Analysis": "What is the median sale_id in the sales table?",
        "Aggregation": "What is the average amount?",
    }

    def reply(body: dict) -> str:
        prompt = body["messages"][0]["content"]
        name = re.search(r"# Target question type\n(.+)\n", prompt).group(1).strip()
        assert "- identifier: " in prompt and "never average, sum, bin" in prompt  # the roles reach the model
        code = 'SELECT ROUND(AVG("amount"), 2) FROM "sales"'
        return (
            f"<question>{asked[name]}</question>\n<description>d</description>\n<type>{name}</type>\n"
            f"<code>\n```sql\n{code}\n```\n</code>"
        )

    llm_server.responder = reply
    write_catalog(root, catalog_rows(small_sqlite))
    four = ["ranking", "counting", "statistical_analysis", "aggregation"]
    params = SynthParams.from_form(dict(FORM, categories=four, n_chains=0, queries_per_category=1))
    for spec in plan_synthesis(root, 10, params):
        synthesize_shard(root, spec, params, "run-1", llm_client=client_factory())
    kept = [r for r in read_rows(root, QUERIES, "queries") if r["backend"] == "llm"]
    assert sorted({r["question"] for r in kept}) == ["In the sales table, what is the average amount?"]
    reasons = Counter(r["reason_code"] for r in read_rows(root, REJECTIONS, "rejections"))
    # asked of both tables: shops has no amount, so its "average amount" is ungrounded too
    assert reasons["identifier_as_measure"] == 2 and reasons["ungrounded_question"] == 5


def test_batch_mode_writes_the_online_rows(tmp_path, small_csv, llm_server):
    """Synthesis in batch mode (the OpenAI Batch API on the loopback server): every query and rejection of
    the online run, row for row, from one batch per step (hops, repairs and re-asks each need the answer before)."""
    from fakes.batch_shard import comparable_rows

    from datamind.llm.batch import run_batched
    from datamind.storage import DataRoot

    def client(root):
        cfg = LLMConfig(base_url=llm_server.base_url, api_key="sk-test", models={"synthesizer": "synth-model"},
                        max_retries=0)  # fmt: skip
        return LLMClient(cfg, cache=ResponseCache(root))

    def rows_of(root):
        return comparable_rows(root, (("queries", QUERIES), ("rejections", REJECTIONS)))

    online, batched = DataRoot(str(tmp_path / "online")), DataRoot(str(tmp_path / "batch"))
    for r in (online, batched):
        write_catalog(r, catalog_rows(small_csv))
    llm_server.responder = responder
    (spec,) = plan_synthesis(online, 10, PARAMS)
    synthesize_shard(online, spec, PARAMS, "run", llm_client=client(online))
    online_requests = llm_server.request_count

    llm_server.reset()
    llm_server.responder = responder
    summary = run_batched(
        lambda r, c: synthesize_shard(r, spec, PARAMS, "run", llm_client=c), batched, client(batched), spec["shard_id"],
        poll_s=0.01,
    )  # fmt: skip
    assert llm_server.request_count == 0  # no online request at all
    assert rows_of(batched) == rows_of(online)
    assert rows_of(online)["queries"] and rows_of(online)["rejections"]
    sent = sum(b["requests"] for b in summary["batches"])
    assert sent == len(llm_server.batch_bodies) == online_requests  # each request asked once, as online
    assert len(summary["batches"]) >= 3  # a chain's hops and the repairs each waited for the step before


def test_a_question_must_fill_its_template_and_its_program_print_an_answer_of_its_form(
    root, catalog, llm_server, client_factory
):
    """What a real 0.5B model wrote at synthesis: the template's slots kept in the question, an exemplar of
    another data set copied, a "how many" whose program printed a list, a program that printed a sentence.
    The slots and the copy are re-asked like any malformed reply; a wrong form is shown to the model like a
    crash; what stays wrong is rejected with its reason, and only questions with answers of their form remain."""
    slot_question = "How many records have [categorical column] equal to [value]?"
    copied = P.category_spec("ranking").exemplars[0]

    def reply(body: dict) -> str:
        prompt, turns = body["messages"][0]["content"], len(body["messages"])
        name = re.search(r"# Target question type\n(.+)\n", prompt).group(1).strip()
        read = _read_code(prompt)
        if name == "Counting":
            last = body["messages"][-1]["content"]
            if turns == 1:  # the first answer keeps the template's slots
                question, code = slot_question, read + "\nprint(len(df))"
            elif "Your <code> ran" not in last:  # re-asked with the slots named: filled, but printing a list
                question, code = "How many records have region equal to 'north'?", read + (
                    "\nprint('; '.join(str(n) for n in df.groupby('region').size()))")  # fmt: skip
            else:  # shown that a list is no count, the program counts
                question, code = "How many records have region equal to 'north'?", read + (
                    "\nprint(int((df['region'] == 'north').sum()))")  # fmt: skip
        elif name == "Ranking":
            question, code = copied, read + "\nprint(df['region'].iloc[0])"
        else:  # Causal Analysis: a program that always answers in prose
            question = "Does a higher price go with more units in this file?"
            code = read + "\nprint('Yes, there is a strong positive relationship between price and units.')"
        return f"<question>{question}</question>\n<description>d</description>\n<type>{name}</type>\n" + (
            f"<code>\n```python\n{code}\n```\n</code>"
        )

    llm_server.responder = reply
    params = SynthParams.from_form(dict(FORM, n_chains=0, queries_per_category=1))
    for spec in plan_synthesis(root, 10, params):
        synthesize_shard(root, spec, params, "run-1", llm_client=client_factory())
    kept = [r for r in read_rows(root, QUERIES, "queries") if r["backend"] == "llm"]
    assert [(r["question"], r["reference_answer"]) for r in kept] == [
        ("How many records have region equal to 'north'?", "3")  # 3 north rows in SMALL_CSV, by hand
    ]
    assert all("[" not in r["question"] and r["question"] != copied for r in kept)
    rejected = {r["reason_code"]: r["reason"] for r in read_rows(root, REJECTIONS, "rejections")}
    assert "copies an example" in rejected["llm_parse_failed"]  # re-asked, copied every time
    assert "printed a sentence" in rejected["answer_form_mismatch"]
    # the count was asked again once with the slots named, and the list shown back as no count
    counting = [
        b["messages"] for b in llm_server.bodies if "Target question type\nCounting" in b["messages"][0]["content"]
    ]
    asked_again = [m[-1]["content"] for m in counting if len(m) == 3]
    assert any("template's slots [categorical column], [value]" in t for t in asked_again)
    assert any("Your <code> ran" in t and "asks how many" in t and "'2; 3; 3'" in t for t in asked_again), asked_again
