"""Start llama-cpp-python's OpenAI server with its prompt cache's memory counted in full.

Run by the serving environment's interpreter (``.venv-serve``, where the project is not installed), as a script:
it imports nothing of the project. The server's RAM cache of evaluated prompts (``--cache true``) holds a copy of
each state, and each copy carries the context's KV bytes and also the logits buffer (``n_batch`` x vocabulary
floats: 311 MB for Qwen2.5's 152k-token vocabulary at n_batch 512) and the token ids; the library counts only
the KV bytes against ``--cache_size``, so a "2 GiB" cache was measured at 12.6 GB resident. Here every byte a
state holds counts, so ``--cache_size`` bounds what the cache really keeps (least recently used states go first).
"""

from __future__ import annotations

import runpy
import sys


def _true_size(cache) -> int:
    return sum(
        state.llama_state_size + state.scores.nbytes + state.input_ids.nbytes for state in cache.cache_state.values()
    )


def main() -> None:
    from llama_cpp import llama_cache

    llama_cache.LlamaRAMCache.cache_size = property(_true_size)
    sys.argv = ["llama_cpp.server", *sys.argv[1:]]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
