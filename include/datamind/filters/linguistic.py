"""Linguistic integrity: no garbled text and no intermingled natural languages in what the agent wrote.

Checked on the agent's own prose (``<think>`` and ``<answer>``, not code, not interpreter output):
  * ``control_chars``    C0/C1 control characters other than newline, tab and carriage return;
  * ``replacement_char`` U+FFFD, the mark of bytes that failed to decode;
  * ``private_use``      private-use code points (no meaning in text);
  * ``mojibake``         UTF-8 decoded as Latin-1/cp1252 ("Ã©", "â€™"), detected by the reverse repair;
  * ``homoglyph``        one word mixing scripts (Latin with Cyrillic/Greek letters: "pаndas");
  * ``mixed_scripts``    a second script holding more than a small share of the letters, e.g. an English
                         answer drifting into Chinese.  Words copied from the data (found in the
                         interpreter output or the question) are exempt: a Chinese city name in a table
                         is not language drift.  Short Greek words are exempt as math symbols (μ, σ).
  * ``mixed_languages``  Latin-script languages switching between sentences (English reasoning with a
                         Spanish sentence): each sentence of 4+ function words is assigned the language
                         whose function words it uses most (clearly most), and two languages in one
                         trajectory fail the check.  Sentences made of words from the data are exempt.
  * ``repetition``       degenerate loops: the same word 8+ times in a row.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from itertools import pairwise

from datamind.llm.tags import extract_all

MAX_MINORITY_SHARE = 0.05
MIN_MINORITY_LETTERS = 3
_MOJIBAKE = re.compile(
    r"[ÃÂâ][\u0080-\u00BF\u2018-\u203A\u20AC\u0152\u0153\u0160\u0161\u0178\u017D\u017E\u0192\u02C6\u02DC]"
)
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_CJK_FAMILY = {"CJK", "HIRAGANA", "KATAKANA", "HALFWIDTH", "IDEOGRAPHIC"}


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_PRIVATE = re.compile(r"[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd]")


@functools.lru_cache(maxsize=65536)
def script_of(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    try:
        first = unicodedata.name(ch).split()[0]
    except ValueError:
        return "UNKNOWN"
    if first in _CJK_FAMILY:
        return "CJK"
    return first  # LATIN, CYRILLIC, GREEK, ARABIC, HEBREW, HANGUL, DEVANAGARI, THAI, ...


def _fixes_as_mojibake(fragment: str) -> bool:
    for enc in ("cp1252", "latin-1"):
        try:
            repaired = fragment.encode(enc).decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            continue
        if repaired != fragment:
            return True
    return False


def check_text(
    text: str, exempt_words: set[str] | frozenset[str] = frozenset(), *, max_minority_share: float = MAX_MINORITY_SHARE
) -> tuple[str, str] | None:
    if m := _CONTROL.search(text):
        return "control_chars", f"control character U+{ord(m.group()):04X} in the agent's text"
    if "\ufffd" in text:
        return "replacement_char", "U+FFFD replacement character (undecodable bytes) in the agent's text"
    if m := _PRIVATE.search(text):
        return "private_use", f"private-use character U+{ord(m.group()):04X} in the agent's text"
    for m in _MOJIBAKE.finditer(text):
        start = max(0, m.start() - 1)
        frag = text[start : m.end() + 2]
        for cut in (frag, m.group(0), text[m.start() : m.end() + 1]):
            if _fixes_as_mojibake(cut):
                return "mojibake", f"mis-decoded UTF-8 near {frag!r}"
    counts: dict[str, int] = {}
    for word in _WORD.findall(text):
        if word.isascii():  # Latin letters only (most words): one script, no homoglyph, no per-letter lookups
            if not (word in exempt_words or word.lower() in exempt_words):
                counts["LATIN"] = counts.get("LATIN", 0) + len(word)
            continue
        scripts = {script_of(c) for c in word} - {None}
        if len(scripts) > 1 and scripts & {"LATIN"} and scripts & {"CYRILLIC", "GREEK"}:
            return "homoglyph", f"word {word!r} mixes {sorted(scripts)} letters"
        if word in exempt_words or word.lower() in exempt_words:
            continue
        for s in scripts:
            if s == "GREEK" and len(word) <= 2:
                continue  # math symbols
            counts[s] = counts.get(s, 0) + sum(1 for c in word if script_of(c) == s)
    total = sum(counts.values())
    if total:
        main = max(counts, key=counts.get)
        minority = total - counts[main]
        if minority >= MIN_MINORITY_LETTERS and minority / total > max_minority_share:
            others = sorted((s for s in counts if s != main), key=counts.get, reverse=True)
            return "mixed_scripts", f"{minority} of {total} letters are {others} in a {main} text"
    words = re.findall(r"\S+", text.lower())
    run = 1
    for a, b in pairwise(words):
        run = run + 1 if a == b else 1
        if run >= 8:
            return "repetition", f"the word {a!r} repeats {run} times in a row"
    return None


# Short lists of very frequent function words; enough to tell whole sentences apart, not a language identifier.
_FUNCTION_WORDS = {
    "en": "the of and to in is that for it with as was on are be this by which have from not but what we".split(),
    "fr": "le la les des du un une est et que qui dans pour sur pas avec ce cette sont nous il elle au aux".split(),
    "de": "der die das und ist nicht mit den dem ein eine zu von auf für sich wir es auch wird sind".split(),
    "es": "el la los las de que y en un una es por con para del se no al lo como sus pero".split(),
    "pt": "o a os as de que e em um uma é para com não do da dos das se por mais".split(),
    "it": "il lo la gli le di che e è un una per con non del della sono nel alla anche".split(),
    "nl": "de het een en van is dat op te in niet met zijn voor er ook wordt aan".split(),
}
_FW_SETS = {lang: frozenset(ws) for lang, ws in _FUNCTION_WORDS.items()}


def sentence_language(sentence: str) -> str | None:
    words = [w.lower() for w in _WORD.findall(sentence)]
    hits = sorted(((sum(w in fw for w in words), lang) for lang, fw in _FW_SETS.items()), reverse=True)
    (best, lang), (second, _) = hits[0], hits[1]
    return lang if best >= 4 and best >= 2 * max(second, 1) else None


def mixed_languages(text: str, exempt_words: set[str] | frozenset[str] = frozenset()) -> tuple[str, str] | None:
    seen: dict[str, str] = {}
    for sentence in re.split(r"(?<=[.!?。])\s+|\n+", text):
        words = _WORD.findall(sentence)
        if words and sum(w in exempt_words for w in words) > len(words) / 2:
            continue  # quoted from the data
        lang = sentence_language(sentence)
        if lang and lang not in seen:
            seen[lang] = sentence.strip()[:60]
    if len(seen) > 1:
        return "mixed_languages", "sentences in " + " and ".join(f"{k} ({v!r})" for k, v in seen.items())
    return None


def _exempt_words(messages: list[dict]) -> set[str]:
    words: set[str] = set()
    for m in messages:
        if m["role"] in ("tool", "user"):
            for w in _WORD.findall(m["content"]):
                words.add(w)
                words.add(w.lower())
    return words


def agent_prose(messages: list[dict]) -> str:
    parts: list[str] = []
    for m in messages:
        if m["role"] != "assistant":
            continue
        found = extract_all(m["content"], "think") + extract_all(m["content"], "answer")
        parts.extend(found)
    return "\n".join(parts)


def check_trajectory(messages: list[dict], *, max_minority_share: float = MAX_MINORITY_SHARE) -> tuple[str, str] | None:
    prose = agent_prose(messages)
    # Control characters and broken decoding anywhere in the agent's turns (code included) are garbling too.
    raw_agent = "\n".join(m["content"] for m in messages if m["role"] == "assistant")
    if m := (_CONTROL.search(raw_agent) or ("\ufffd" in raw_agent and re.search("\ufffd", raw_agent))):
        return check_text(m.group())
    exempt = _exempt_words(messages)
    return check_text(prose, exempt, max_minority_share=max_minority_share) or mixed_languages(prose, exempt)
