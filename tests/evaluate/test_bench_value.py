"""The value loop's pieces that need no model: its intervals, the arms it plans and what a rerun keeps."""

from __future__ import annotations

import json
import os
from argparse import Namespace

import pytest
from script_modules import load_script

bv = load_script("bench_value")


@pytest.mark.parametrize(
    ("k", "n", "lo", "hi"),
    [
        # by hand: centre (p + z^2/2n) / (1 + z^2/n), half z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n), z = 1.96
        (0, 20, 0.0, 0.16113),  # z^2/n / (1 + z^2/n) = 0.19208 / 1.19208
        (10, 20, 0.29930, 0.70070),  # 0.5 -+ 1.96 * sqrt(0.0125 + 0.0024010) / 1.19208
        (20, 20, 0.83887, 1.0),  # (1.09604 - 0.09604) / 1.19208 below, 1 above
        (1, 8, 0.02241, 0.47088),  # the 0.5B pass@1 of 1 in 8
    ],
)
def test_wilson_intervals_match_the_hand_computed_values(k, n, lo, hi):
    got = bv.wilson(k, n)
    assert got == pytest.approx((lo, hi), abs=2e-4)
    assert bv.wilson(k, 0) == (0.0, 1.0)  # nothing measured: nothing known


def test_figures_become_counts_over_the_right_denominators():
    fig = {"n": 5, "outcomes": {"correct": 3, "wrong": 5, "max_turns": 2}, "turns": 25, "valid_format": 0.8,
           "runnable_code": 0.36, "answer_rate": 0.8, "pass@1": 0.3, "pass@2": 0.6}  # fmt: skip
    got = bv.counts(fig, trials=2)
    # pass@1 and answers over the 10 trials, format and code over the 25 turns, pass@2 over the 5 questions
    assert got == {"pass@1": (3, 10), "answer_rate": (8, 10), "valid_format": (20, 25), "runnable_code": (9, 25),
                   "pass@2": (3, 5)}  # fmt: skip
    assert set(bv.counts(fig, trials=1)) == {"pass@1", "answer_rate", "valid_format", "runnable_code"}
    shown = bv.with_intervals(fig, 2)["pass@1"]
    assert shown["rate"] == 0.3 and shown["ci95"] == bv.wilson(3, 10)


def test_beating_the_base_needs_the_intervals_apart():
    base = {"ci95": bv.wilson(1, 20)}  # upper 0.236
    assert not bv.beats({"ci95": bv.wilson(5, 20)}, base)  # 0.25 against 0.05 still overlaps at n=20 (lower 0.112)
    assert bv.beats({"ci95": bv.wilson(10, 20)}, base)  # lower 0.299 above 0.236
    assert not bv.beats(base, {"ci95": bv.wilson(10, 20)})


def test_the_arms_compare_without_grammar_first_and_control_on_dabench_only():
    arms = bv.plan_arms("/d/dabench", "")
    assert [a.label for a in arms] == ["base/nogrammar", "tuned/nogrammar", "base/grammar", "tuned/grammar",
                                       "tuned/nofile"]  # fmt: skip
    assert arms[0].suites == arms[1].suites == {"dabench": "/d/dabench", "heldout": ""}
    assert all(a.suites == {"dabench": "/d/dabench"} and a.grammar == "llama.cpp" for a in arms[2:4])
    assert (arms[4].withhold_data, arms[4].grammar, arms[4].suites) == (True, None, {"dabench": "/d/dabench"})
    assert not any(a.withhold_data or a.grammar for a in arms[:2])
    assert [a.label for a in bv.plan_arms("", "3")] == ["base/nogrammar", "tuned/nogrammar"]  # nothing to control
    assert [a.label for a in bv.plan_arms("/d", None, grammar=False)] == [*[a.label for a in arms[:2]], "tuned/nofile"]
    with pytest.raises(ValueError, match="no suite"):
        bv.plan_arms("", None)


def _args(**kw):
    return Namespace(**{"trials": 1, "limit": 20, "heldout_limit": 7, "max_turns": 5, "max_tokens": 512,
                        "concurrency": 2, **kw})  # fmt: skip


def test_each_arm_and_suite_is_an_evaluation_of_its_own(tmp_path):
    base, tuned = tmp_path / "base.q8_0.gguf", tmp_path / "tuned.q8_0.gguf"
    main_b, main_t, gram_b, _, nofile = bv.plan_arms("/d", "")
    ids = {
        bv.eval_params(arm, suite, gguf, _args()).eval_id()
        for arm, gguf in ((main_b, base), (main_t, tuned), (gram_b, base), (nofile, tuned))
        for suite in arm.suites
    }
    assert len(ids) == 6  # no two evaluations share a folder, so none overwrites another's results
    p = bv.eval_params(main_t, "heldout", tuned, _args())
    assert (p.limit, p.temperature, p.top_p, p.serve_engine, p.checkpoint) == (7, 0.7, 0.95, "llama.cpp", str(tuned))
    assert bv.eval_params(main_t, "dabench", tuned, _args()).limit == 20
    assert bv.eval_params(nofile, "dabench", tuned, _args()).withhold_data


def test_a_rerun_keeps_what_an_earlier_run_finished(tmp_path):
    p = bv.paths(tmp_path, "student", bv.train_key("student", "", {"lr": 1e-5, "steps": 30}), "q8_0")
    assert bv.todo(p) == ["export_base", "train", "export_tuned"]
    p.base_gguf.parent.mkdir(parents=True)
    p.base_gguf.write_bytes(b"GGUF")
    assert bv.todo(p) == ["train", "export_tuned"]
    p.checkpoint.mkdir(parents=True)
    (p.checkpoint / "config.json").write_text("{}")
    assert bv.todo(p) == ["train", "export_tuned"]  # a checkpoint without its record: training was cut short
    p.train_record.write_text(json.dumps({"curve": []}))
    assert bv.todo(p) == ["export_tuned"]
    p.tuned_gguf.write_bytes(b"GGUF")
    assert bv.todo(p) == []
    # trained again after the export: the served file is stale
    later = p.tuned_gguf.stat().st_mtime + 10
    os.utime(p.checkpoint / "config.json", (later, later))
    assert bv.todo(p) == ["export_tuned"]


def test_another_release_or_setting_never_reuses_a_checkpoint():
    key = bv.train_key("s", "", {"lr": 1e-5, "steps": 30})
    assert key == bv.train_key("s", "latest", {"steps": 30, "lr": 1e-5})  # '' means the latest; order is no setting
    others = [("s", "3", {"lr": 1e-5, "steps": 30}), ("s", "", {"lr": 1e-4, "steps": 30}), ("t", "", {"lr": 1e-5})]
    assert len({key, *(bv.train_key(*o) for o in others)}) == 4


def test_a_finished_evaluation_is_read_back_and_an_unfinished_one_is_not(tmp_path):
    from datamind.storage import DataRoot

    root = DataRoot(str(tmp_path))
    arm = bv.plan_arms("/d", None)[0]
    params = bv.eval_params(arm, "dabench", tmp_path / "b.gguf", _args())
    assert bv.recorded(root, params) is None
    # where the stage writes it: the served checkpoint's model id is one of the parameters it hashes
    from dataclasses import replace

    from datamind.evaluate.stage import served_name

    written = replace(params, model=served_name(params.checkpoint)).eval_id()
    assert written != params.eval_id()
    root.write_text(f"eval/{written}/summary.json", json.dumps({"suites": {"dabench": {"n": 20}}}))
    assert bv.recorded(root, params)["suites"] == {"dabench": {"n": 20}}
    other = bv.eval_params(arm, "dabench", tmp_path / "t.gguf", _args())
    assert bv.recorded(root, other) is None
