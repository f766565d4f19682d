"""The audit's sentence counts: exact against a plain count over the whole stream, whatever the folds, and
small in memory when a real model's text makes nearly every sentence distinct."""

from __future__ import annotations

import random
import tracemalloc
from collections import Counter

import pytest

from datamind.publish.audit import EXAMPLES, _SentenceCounts


def _reference(stream: list[tuple[str, str]]) -> tuple[str, int, list[str]]:
    counts = Counter(text for text, _ in stream)
    order = list(dict.fromkeys(text for text, _ in stream))  # first seen first
    best = max(order, key=lambda t: (counts[t], -order.index(t)))
    return best, counts[best], [sid for text, sid in stream if text == best][:EXAMPLES]


@pytest.mark.parametrize("seed", range(6))
def test_the_top_sentence_its_count_and_first_examples_match_a_plain_count_across_folds(seed):
    rng = random.Random(seed)
    vocabulary = [f"Sentence {i}." for i in range(rng.choice([5, 40, 400]))]
    weights = [rng.paretovariate(1.2) for _ in vocabulary]  # a few common sentences, a long tail
    stream = [(t, f"s{i}") for i, t in enumerate(rng.choices(vocabulary, weights, k=rng.randint(1, 3_000)))]
    counts = _SentenceCounts(fold=rng.choice([1, 7, 64, 10_000]), keep=rng.choice([1, 3, 64]))
    for text, sid in stream:
        counts.add(hash(text), text, sid)
    text, n, examples = counts.top()
    want_text, want_n, want_examples = _reference(stream)
    assert (text, n) == (want_text, want_n)
    if counts.keep >= len(vocabulary) or counts.fold >= len(stream):  # never pruned: its very first samples
        assert examples == want_examples
    else:  # samples that hold it, in order
        assert (
            examples
            and set(examples) <= {sid for t, sid in stream if t == text}
            and examples == sorted(examples, key=lambda s: int(s[1:]))
        )


def test_ties_go_to_the_sentence_seen_first_and_nothing_counted_gives_no_sentence():
    counts = _SentenceCounts(fold=2, keep=1)
    for text in ["b", "a", "a", "b", "c"]:
        counts.add(hash(text), text, None)
    assert counts.top() == ("b", 2, [])
    assert _SentenceCounts().top() == ("", 0, [])


def test_distinct_sentences_cost_bytes_not_objects():
    """300,000 distinct sentences (a release of 60,000 samples from a real model): a dict per sentence with
    its text and a list of sample ids peaked at 75 MB here; the folded arrays hold 7 MB and peak under 25."""
    counts = _SentenceCounts()
    texts = [f"Checking column {i:x} of the frame." for i in range(300_000)]  # made before the count starts
    tracemalloc.start()
    for i, text in enumerate(texts):
        counts.add(hash(text), text, f"s{i // 5}")
    text, n, _ = counts.top()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (text, n) == (texts[0], 1)
    assert peak < 25_000_000, peak


def test_small_releases_report_sample_size_figures_without_failing_on_them():
    """A one-file release of 43 samples shares its first look at the file (11.6% of samples had the same
    sentence) and, from a clean file, recovers from no error: reported, not judged; 100 samples are judged."""
    from datamind.publish.audit import misses, verdicts

    figures = {"n_samples": 43, "top_sentence_share": 0.1163, "error_recovery_share": 0.0, "warning_share": 0.5}
    rows = {v["name"]: v for v in verdicts(figures)}
    assert rows["top_sentence_share"]["ok"] is None and rows["error_recovery_share"]["ok"] is None
    assert "judged on 100+ samples only; this release has 43" in rows["error_recovery_share"]["why_not_judged"]
    assert [m.split(" = ")[0] for m in misses(figures)] == ["warning_share"]  # every other figure still judged
    figures["n_samples"] = 100
    assert sorted(m.split(" = ")[0] for m in misses(figures)) == [
        "error_recovery_share", "top_sentence_share", "warning_share"
    ]  # fmt: skip
