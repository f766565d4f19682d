"""A checkpoint under evaluation behind the OpenAI chat-completions protocol on loopback, served by the same
servers as every other local model (``datamind.llm.serving``): ``transformers serve`` on a CPU worker, vLLM on
a GPU worker, llama.cpp for a GGUF file. The evaluation drives it with the project's one LLM client.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from datamind.llm.serving import ENGINES, ServeSpec, pick_engine
from datamind.llm.serving import serve as _serve

__all__ = ["ENGINES", "pick_engine", "serve"]


@contextmanager
def serve(path: str, name: str, engine: str = "auto", threads: int = 0) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:<port>/v1``) of ``path`` served as model ``name``."""
    with _serve(ServeSpec(path, name, engine, threads)) as server:
        yield server.base_url
