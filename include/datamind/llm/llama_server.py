"""Start llama-cpp-python's OpenAI server with its prompt cache's memory counted in full.

Run by the serving environment's interpreter (``.venv-serve``, where the project is not installed), as a script:
it imports nothing of the project. The server's RAM cache of evaluated prompts (``--cache true``) holds a copy of
each state, and each copy carries the context's KV bytes and also the logits buffer (``n_batch`` x vocabulary
floats: 311 MB for Qwen2.5's 152k-token vocabulary at n_batch 512) and the token ids; the library counts only
the KV bytes against ``--cache_size``, so a "2 GiB" cache was measured at 12.6 GB resident. Here every byte a
state holds counts, so ``--cache_size`` bounds what the cache really keeps (least recently used states go first).

The logits a state carries are never read back: after ``load_state`` the library always decodes at least one
prompt token again before it samples (a restored state's logits are stale by its own rule). So a state keeps
one row of them, which ``load_state``'s assignment broadcasts, instead of the whole buffer: a Qwen state goes
from 311 MB plus its KV bytes to its KV bytes (28 KB a token for the 1.5B model).

The library's responses count every prompt token, evaluated or reused. Each completion here also says how many
it reused, in OpenAI's field (``usage.prompt_tokens_details.cached_tokens``), so a client measures what the
prefix cache saved the same way on this server as on a hosted endpoint: tokens decoded before the first sample
are the ones the prompt really cost.
"""

import runpy
import sys


def _true_size(cache) -> int:
    return sum(
        state.llama_state_size + state.scores.nbytes + state.input_ids.nbytes for state in cache.cache_state.values()
    )


def _lean_save(save_state):
    def save(self):
        state = save_state(self)
        state.scores = state.scores[-1:].copy()  # see the module's docstring: never read after a load
        return state

    return save


def _count_prompt_evaluation(cls) -> None:
    evaluate, sample, complete = cls.eval, cls.sample, cls.create_completion

    def eval(self, tokens):
        if getattr(self, "_prompt_phase", False):
            self._prompt_evaluated += len(tokens)
        return evaluate(self, tokens)

    def first_sample_ends_the_prompt(self, *args, **kwargs):
        self._prompt_phase = False
        return sample(self, *args, **kwargs)

    def create_completion(self, *args, **kwargs):
        self._prompt_phase, self._prompt_evaluated = True, 0
        out = complete(self, *args, **kwargs)
        usage = out.get("usage") if isinstance(out, dict) else None  # a stream has no usage to amend
        if isinstance(usage, dict):
            reused = max(0, int(usage.get("prompt_tokens") or 0) - self._prompt_evaluated)
            usage["prompt_tokens_details"] = {"cached_tokens": reused}
        return out

    cls.eval, cls.sample, cls.create_completion = eval, first_sample_ends_the_prompt, create_completion

    # The server's response models are TypedDicts that drop keys they do not declare: declare the field. (No
    # ``from __future__ import annotations`` in this module: pydantic could not resolve a local class's names.)
    from typing import NotRequired

    from llama_cpp import llama_types
    from typing_extensions import TypedDict  # pydantic takes only this one before Python 3.12

    class PromptTokensDetails(TypedDict):
        cached_tokens: int

    class Usage(llama_types.CompletionUsage):
        prompt_tokens_details: NotRequired[PromptTokensDetails]

    for response in (llama_types.CreateCompletionResponse, llama_types.CreateChatCompletionResponse):
        response.__annotations__["usage"] = NotRequired[Usage] if "usage" in response.__optional_keys__ else Usage


def main() -> None:
    from llama_cpp import llama, llama_cache

    llama_cache.LlamaRAMCache.cache_size = property(_true_size)
    llama.Llama.save_state = _lean_save(llama.Llama.save_state)
    _count_prompt_evaluation(llama.Llama)
    sys.argv = ["llama_cpp.server", *sys.argv[1:]]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
