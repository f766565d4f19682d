"""A fine-tuned Hugging Face checkpoint -> a GGUF file llama.cpp serves, on the layout of the GGUF it came from.

``python -m datamind.train.gguf_export BASE.gguf CHECKPOINT_DIR OUT.gguf [--type q8_0|f16]`` (run in the engines'
environment, ``.venv-train``: it needs ``torch``, ``safetensors`` and ``gguf``; nothing else of the project is
imported but :mod:`datamind.train.gguf_import`).

The inverse of :mod:`datamind.train.gguf_import` for a checkpoint trained from an imported GGUF: the base file's
metadata (vocabulary, chat template, hyper-parameters) and tensor list are kept as they are, and each tensor's
data is replaced by the checkpoint's weight of the same name (gguf-py's own name map, the one llama.cpp's
converter uses). Where llama.cpp's converter permutes the query and key projections (the ``llama`` family: it
interleaves rotary halves; transformers undoes it on import) the permutation is applied again. A checkpoint
that lacks a tensor of the base file, or holds it in another shape, is refused naming the tensor: a different
architecture served on a foreign vocabulary would generate garbage without an error.

Weights are written as Q8_0 by default. On a CPU llama.cpp is bound by the bytes it reads per token: Q8_0 is half
of F16's, its dot-product kernels are the fastest of llama.cpp's CPU paths here (a Q4_1 file evaluated prompts
1.6-1.7x slower than its Q8_0 copy, ``gguf_import.requantize``), and its error (at most half a step of
max|w|/127 per block of 32) is far below the 4-bit files the catalogue ships. What Q8_0 could lose is a
fine-tuning update smaller than its step: the summary states the root-mean-square of what training changed
(tuned minus the base file's weights) and of what the rounding changed (written minus tuned), so a run whose
update drowns in the rounding says so; ``--type f16`` then keeps it (3 significant digits, twice the bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# llama.cpp's converter permutes q/k projections for these architectures (LlamaModel.permute); others as they are
_PERMUTED = ("llama", "mistral")
TYPES = ("q8_0", "f16")


def permute(w, n_head: int):
    """llama.cpp's ``LlamaModel.permute``: the rotary halves of each head interleaved (HF -> GGUF order)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader, key: str):
    fld = reader.fields.get(key)
    return None if fld is None else fld.contents()


def gguf_names(reader, hf_names) -> dict[str, str]:
    """GGUF tensor name -> the checkpoint's name for it, by gguf-py's map for the base file's architecture."""
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

    arch = str(_field(reader, "general.architecture"))
    by_name = {v: k for k, v in MODEL_ARCH_NAMES.items()}
    if arch not in by_name:
        raise ValueError(f"gguf-py has no tensor map for architecture {arch!r}")
    blocks = int(_field(reader, f"{arch}.block_count"))
    table = get_tensor_name_map(by_name[arch], blocks)
    out: dict[str, str] = {}
    for hf in hf_names:
        name = table.get_name(hf, try_suffixes=(".weight", ".bias"))
        if name is not None:
            out[name] = hf
    return out


def _quantize(w, qtype):
    """(data, raw dtype) of float32 ``w`` written as ``qtype``; rows that Q8_0's 32-blocks do not divide go F16."""
    import numpy as np
    from gguf import GGMLQuantizationType, quants

    if qtype == GGMLQuantizationType.Q8_0 and w.shape[-1] % 32 == 0:
        return quants.quantize(w, qtype), qtype
    return w.astype(np.float16), GGMLQuantizationType.F16


def write(base_gguf: str, tensors, out_path: str, out_type: str = "q8_0", tie_embeddings: bool = False) -> dict:
    """Write ``out_path``: ``base_gguf``'s metadata and layout with ``tensors`` (checkpoint name -> a callable
    returning a float32 numpy array) as the data. Returns figures of what changed (see the module's docstring)."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, LlamaFileType, quants

    from datamind.train.gguf_import import staged_gguf

    if out_type not in TYPES:
        raise ValueError(f"type must be one of {TYPES}, got {out_type!r}")
    qtype = GGMLQuantizationType.Q8_0 if out_type == "q8_0" else GGMLQuantizationType.F16
    ftype = LlamaFileType.MOSTLY_Q8_0 if out_type == "q8_0" else LlamaFileType.MOSTLY_F16
    reader = GGUFReader(base_gguf)
    arch = str(_field(reader, "general.architecture"))
    n_head = int(_field(reader, f"{arch}.attention.head_count"))
    n_head_kv = int(_field(reader, f"{arch}.attention.head_count_kv") or n_head)
    names = gguf_names(reader, tensors)
    if tie_embeddings and "output.weight" not in names and "token_embd.weight" in names:
        names["output.weight"] = names["token_embd.weight"]  # a tied head is saved once, as the embedding
    missing = [t.name for t in reader.tensors if t.name not in names]
    if missing:
        raise ValueError(
            f"the checkpoint has no weight for the base GGUF's tensor {missing[0]!r} "
            f"({len(missing)} missing in all): not a checkpoint of {os.path.basename(base_gguf)}"
        )
    moved = rounded = count = 0.0
    with staged_gguf(reader, out_path, ftype) as writer:
        for t in reader.tensors:
            want = tuple(int(d) for d in reversed(t.shape))  # GGUF lists dimensions innermost first
            w = np.asarray(tensors[names[t.name]](), dtype=np.float32)
            if tuple(w.shape) != want and not (len(want) == 1 and w.size == want[0]):
                raise ValueError(
                    f"tensor {t.name!r} (checkpoint {names[t.name]!r}) has shape {tuple(w.shape)}, "
                    f"the base GGUF's is {want}: not a checkpoint of {os.path.basename(base_gguf)}"
                )
            w = w.reshape(want)
            if arch in _PERMUTED and t.name.endswith(("attn_q.weight", "attn_k.weight")):
                w = permute(w, n_head if t.name.endswith("attn_q.weight") else n_head_kv)
            if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                data, raw = w.astype(np.float32 if t.tensor_type == GGMLQuantizationType.F32 else np.float16), None
                written = data.astype(np.float32)
            else:
                data, raw = _quantize(w, qtype)
                written = quants.dequantize(data, raw).reshape(want) if raw != GGMLQuantizationType.F16 else data
            base = quants.dequantize(t.data, t.tensor_type).reshape(want)
            moved += float(np.sum((w - base) ** 2))
            rounded += float(np.sum((np.asarray(written, dtype=np.float32) - w) ** 2))
            count += w.size
            if raw is None:
                writer.add_tensor(t.name, data)
            else:
                writer.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=raw)
    return {
        "base": os.path.basename(base_gguf),
        "gguf": os.path.basename(out_path),
        "type": out_type,
        "tensors": len(reader.tensors),
        "rms_trained": (moved / count) ** 0.5,  # how far training moved the weights from the base file's
        "rms_rounding": (rounded / count) ** 0.5,  # how far writing them as `type` moved them again
    }


def export(base_gguf: str, checkpoint: str, out_path: str, out_type: str = "q8_0") -> dict:
    """``checkpoint``'s weights (every ``*.safetensors`` file in it) written on ``base_gguf``'s layout."""
    import glob

    import torch
    from safetensors import safe_open

    files = sorted(glob.glob(os.path.join(checkpoint, "*.safetensors")))
    if not files:
        raise FileNotFoundError(f"{checkpoint} holds no .safetensors weights")
    where = {}
    for f in files:
        with safe_open(f, framework="pt") as fh:
            where.update({k: f for k in fh.keys()})

    def loader(name: str):
        def load():
            with safe_open(where[name], framework="pt") as fh:
                return fh.get_tensor(name).to(torch.float32).numpy()

        return load

    tied = False
    try:
        with open(os.path.join(checkpoint, "config.json"), encoding="utf-8") as fh:
            tied = bool(json.load(fh).get("tie_word_embeddings"))
    except (OSError, ValueError):
        pass
    # the data a checkpoint saves under a prefix (a PEFT-merged "base_model.model.") maps like the plain name
    tensors = {k.removeprefix("base_model.model."): loader(k) for k in where}
    return write(base_gguf, tensors, out_path, out_type, tie_embeddings=tied)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base_gguf", help="the GGUF the checkpoint was imported from (gguf_import)")
    ap.add_argument("checkpoint", help="the fine-tuned checkpoint folder (safetensors)")
    ap.add_argument("out", help="the .gguf file to write (replaced)")
    ap.add_argument("--type", default="q8_0", choices=TYPES, help="how the quantized weights are written")
    args = ap.parse_args(argv)
    print(json.dumps(export(args.base_gguf, args.checkpoint, args.out, args.type), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
