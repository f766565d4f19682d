"""A tiny randomly initialised causal LM and a tokenizer trained on local text: no downloads.

Used by the tests and by ``make demo`` (``DATAMIND_DEMO_TRAIN=1``) to exercise the trainer end to end
on a CPU. It learns nothing useful; it proves the plumbing (masks, losses, schedules, checkpoints).

    python -m datamind.train.tiny OUT_DIR [--data-root ROOT]
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable

from datamind.train.tokenization import DEFAULT_CHAT_TEMPLATE

REACT_TAGS = ["<think>", "</think>", "<code>", "</code>", "<answer>", "</answer>", "<interpreter>", "</interpreter>"]
_FALLBACK_TEXT = [
    "The final answer is 42.",
    "import pandas as pd\ndf = pd.read_csv('x.csv')\nprint(df.head())",
]


def build_tokenizer(texts: Iterable[str], vocab_size: int = 600):
    """Byte-level BPE trained on ``texts`` with the ReAct tags as single tokens and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    lines = [t for t in texts if t] + _FALLBACK_TEXT
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|pad|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines * 4, trainer)
    tok.add_tokens(REACT_TAGS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|im_end|>")
    fast.chat_template = DEFAULT_CHAT_TEMPLATE
    return fast


def build_tiny_model(out_dir: str, texts: Iterable[str], *, layers: int = 2, hidden: int = 64, seed: int = 0) -> str:
    """Save a random ``layers``-layer Llama plus its tokenizer to ``out_dir`` like any local checkpoint."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(texts)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,  # its tokenizer's prompts run about twice a real one's length
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    # Name the tokenizer class every transformers release knows: the engines' environment (LLaMA-Factory)
    # runs an older transformers than the one that saved it, which calls it ``TokenizersBackend``.
    conf_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(conf_path, encoding="utf-8") as fh:
        conf = json.load(fh)
    conf["tokenizer_class"] = "PreTrainedTokenizerFast"
    with open(conf_path, "w", encoding="utf-8") as fh:
        json.dump(conf, fh, indent=2)
    return out_dir


def dataset_texts(data_root: str, limit: int = 200) -> list[str]:
    """Message texts of the published dataset, to train the tiny tokenizer on realistic content."""
    from datamind import tables
    from datamind.storage import DataRoot

    table = tables.read(DataRoot(data_root), "dataset", ["messages"])
    texts: list[str] = []
    for messages in table.column("messages").to_pylist()[:limit]:
        texts.extend(m["content"] for m in messages or [])
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--data-root", help="train the tokenizer on this data root's dataset messages")
    args = parser.parse_args(argv)
    texts = dataset_texts(args.data_root) if args.data_root else []
    print(build_tiny_model(args.out_dir, texts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
