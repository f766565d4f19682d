"""A GGUF model file -> a Hugging Face checkpoint folder that trains, serves and converts back like any other.

``python -m datamind.train.gguf_import MODEL.gguf OUT_DIR [--q8-gguf FAST.gguf]`` (run in the engines'
environment, ``.venv-train``: it needs ``transformers``, ``accelerate`` and ``gguf``; nothing else of the project
is imported).

transformers reads a GGUF's weights correctly but builds its tokenizer the way it would for a SentencePiece
Llama: the end-of-sequence token becomes the first special token it finds (``<|im_start|>`` for the ChatML
models), a BOS is put in front of every encode, and the whole GGUF is copied again as ``tokenizer.model``.
A checkpoint saved like that trains on turns that never end and serves replies that run to ``max_tokens``.
This module keeps the weights, then rebuilds the tokenizer from the GGUF's own vocabulary: no BOS added, the
chat template's turn terminator as end-of-sequence and padding, the same special tokens, and it checks an
encode/decode round trip and the template's rendering before it writes anything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile

# Text whose round trip through the tokenizer must be exact: code, tags, unicode, runs of spaces, newlines.
_ROUND_TRIP = (
    "<think>\nThe mean of `Revenue (€)` is what matters.\n</think>\n<code>\n```python\n"
    "import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df['Revenue (€)'].mean())   # 3 spaces\n```\n</code>"
)


def _terminator(template: str, specials: list[str]) -> str:
    """The special token that closes a turn in ``template`` (ChatML's ``<|im_end|>``, Llama 3's ``<|eot_id|>``,
    ...): the first special token the template writes right after a message's content."""
    after_content = template.split("content", 1)[-1]
    found = [(after_content.find(s), s) for s in specials if s in after_content]
    if not found:
        raise ValueError(f"no special token closes a turn in the chat template: {template[:200]!r}")
    return min(found)[1]


def convert(gguf_path: str, out_dir: str, dtype: str = "float32") -> dict:
    """Write the checkpoint for ``gguf_path`` into ``out_dir`` (replaced whole, never half-written)."""
    import torch
    from tokenizers import Tokenizer, processors
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    folder, name = os.path.split(os.path.abspath(gguf_path))
    raw = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    template = raw.chat_template
    if not template:
        raise ValueError(f"{gguf_path} carries no chat template (tokenizer.chat_template)")
    specials = [t for t in raw.all_special_tokens] + [str(t) for t in raw.added_tokens_decoder.values()]
    eos = _terminator(template, sorted(set(specials)))
    backend = Tokenizer.from_str(raw.backend_tokenizer.to_str())
    # the GGUF import adds a BOS template; a byte-level BPE vocabulary (GPT-2 style) adds nothing
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=raw.bos_token if raw.bos_token != eos else None,
        eos_token=eos,
        pad_token=eos,
        unk_token=raw.unk_token,
        clean_up_tokenization_spaces=False,
        model_max_length=raw.model_max_length,
    )
    tok.chat_template = template
    ids = tok(_ROUND_TRIP)["input_ids"]
    if tok.decode(ids) != _ROUND_TRIP:
        raise ValueError("the rebuilt tokenizer does not round-trip text exactly")
    if ids[0] == tok.convert_tokens_to_ids(raw.bos_token or ""):
        raise ValueError("the rebuilt tokenizer still prepends a BOS token")
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    if eos not in chat:
        raise ValueError(f"the chat template never writes the end-of-turn token {eos!r}")

    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=getattr(torch, dtype))
    eos_id = tok.convert_tokens_to_ids(eos)
    model.config.eos_token_id = eos_id
    model.config.pad_token_id = eos_id
    model.config.bos_token_id = tok.bos_token_id
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = eos_id
    model.generation_config.bos_token_id = tok.bos_token_id

    parent = os.path.dirname(os.path.abspath(out_dir)) or "."
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".gguf-import-", dir=parent)
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tok.save_pretrained(staging)
        summary = {
            "source": os.path.basename(gguf_path),
            "architecture": (model.config.architectures or [type(model).__name__])[0],
            "parameters": sum(p.numel() for p in model.parameters()),
            "dtype": dtype,
            "eos_token": eos,
            "vocab_size": len(tok),
        }
        with open(os.path.join(staging, "datamind_import.json"), "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=2, sort_keys=True)
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        # mkdtemp made it 0700 (and safetensors writes 0600): a worker of another uid serves or trains from it
        os.chmod(staging, 0o755)
        for name in os.listdir(staging):
            os.chmod(os.path.join(staging, name), 0o644)
        os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return summary


def copy_metadata(reader, path: str, file_type: int):
    """A ``GGUFWriter`` for ``path`` holding every key of ``reader``'s file (vocabulary, chat template,
    hyper-parameters) but the file type, which says what its weights now are; tensors are the caller's."""
    from gguf import GGUFValueType, GGUFWriter

    writer = GGUFWriter(path, str(reader.fields["general.architecture"].contents()))
    for name, fld in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":  # the writer adds these itself
            continue
        value = int(file_type) if name == "general.file_type" else fld.contents()
        array = fld.types[0] == GGUFValueType.ARRAY
        writer.add_key_value(name, value, fld.types[0], sub_type=fld.types[-1] if array else None)
    return writer


@contextlib.contextmanager
def staged_gguf(reader, dst: str, file_type: int):
    """A writer holding ``reader``'s metadata (``copy_metadata``) for the caller to add tensors to; on leaving,
    the file is written beside ``dst`` and moved onto it, so a server never reads half a file, and on an
    error nothing is left at either path."""
    tmp = f"{dst}.{os.getpid()}.tmp"
    writer = copy_metadata(reader, tmp, file_type)
    try:
        yield writer
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, dst)
    except BaseException:
        try:
            writer.close()
        except Exception:  # nothing was opened yet: nothing to close  # noqa: S110
            pass
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def requantize(src: str, dst: str) -> dict:
    """``src`` rewritten with every quantized weight as Q8_0 (metadata, vocabulary and chat template kept).

    A 4-bit file is what fits a download; on a CPU, llama.cpp's 8-bit kernels read prompts faster (1.7x in an
    earlier probe here; on a busy box we measured no loss either way), and the pipelines here are mostly
    prompt. Dequantizing 4-bit blocks and requantizing them at 8 bits keeps every weight within Q8_0's step of
    the 4-bit value: nothing is lost that the file had.
    """
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, LlamaFileType, quants

    target = GGMLQuantizationType.Q8_0
    reader = GGUFReader(src)
    changed = 0
    with staged_gguf(reader, dst, LlamaFileType.MOSTLY_Q8_0) as writer:
        for t in reader.tensors:
            if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                writer.add_tensor(t.name, t.data)
                continue
            data = t.data
            if t.tensor_type != target:
                data = quants.quantize(quants.dequantize(t.data, t.tensor_type).astype(np.float32), target)
                changed += 1
            writer.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=target)
    return {"source": os.path.basename(src), "q8_0": os.path.basename(dst), "requantized_tensors": changed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", help="the .gguf file")
    ap.add_argument("out_dir", help="checkpoint folder to write (replaced)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--q8-gguf", default="", help="also write the GGUF with its weights as Q8_0 to this path")
    args = ap.parse_args(argv)
    summary = convert(args.gguf, args.out_dir, args.dtype)
    if args.q8_gguf:
        summary.update(requantize(args.gguf, args.q8_gguf))
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
