"""A thought must not claim what its cell did not do: a step that announces a fix (a re-read, a dropped
column) while its output shows the same thing as before teaches a model to say it fixed something and do
nothing. The rule filter drops such a trajectory; the release audit counts the samples that slip through."""

from __future__ import annotations

import re

_FIX_WORDS = re.compile(r"\b(?:read (?:it )?again|second read|re-?read|drop|remove|fix|correct)", re.IGNORECASE)
_QUOTED_UNNAMED = re.compile(r"'(Unnamed: \d+)'")


def unchanged_fix(thinks: list[str], outputs: list[str]) -> bool:
    """Whether turn ``i``'s thought announces a correction of what output ``i - 1`` showed while output ``i``
    shows the same (the same print, or the 'Unnamed: n' column the thought said it would deal with)."""
    for i in range(1, min(len(thinks), len(outputs))):
        if not _FIX_WORDS.search(thinks[i]):
            continue
        before, after = " ".join(outputs[i - 1].split()), " ".join(outputs[i].split())
        if before == after and "Traceback" not in before:
            return True
        if any(name in outputs[i] for name in _QUOTED_UNNAMED.findall(thinks[i])):
            return True
    return False
