"""gguf_export writes a checkpoint imported from a GGUF back onto that GGUF's layout, and llama.cpp serves it.

Runs in the engines' environment (``.venv-train``: gguf, torch) and llama.cpp's (``.venv-serve``) over the SmolLM2
checkpoint the local model's preparation imported; skips, saying what is missing, where either is absent.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from datamind.llm import local, models
from datamind.llm.serving import llama_cpp_python
from datamind.settings import REPO_ROOT

TRAIN_PY = REPO_ROOT / ".venv-train" / "bin" / "python"
NAME = "smollm2-135m-instruct"


def _inputs() -> tuple[str, str]:
    if not TRAIN_PY.is_file():
        pytest.skip(".venv-train is not built here (make train-env): gguf_export runs there")
    model = models.get(NAME)
    if not models.ready(model):
        pytest.skip(f"{NAME}'s GGUF is not assembled here (python -m datamind.llm.models fetch {NAME})")
    ckpt = local.checkpoint_dir(NAME)
    if not (ckpt / "datamind_import.json").is_file():
        pytest.skip(f"{NAME} is not imported here (python -m datamind.llm.local prepare)")
    return str(models.assembled_path(model)), str(ckpt)


def _run(py, code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "include"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([str(py), "-c", code, *args], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_EXPORT_AND_COMPARE = """
import json, sys
import numpy as np
from gguf import GGUFReader
from datamind.train import gguf_export, gguf_import
base, ckpt, tmp = sys.argv[1:4]
q8 = gguf_export.export(base, ckpt, tmp + "/export.q8_0.gguf", "q8_0")
f16 = gguf_export.export(base, ckpt, tmp + "/export.f16.gguf", "f16")
# the independent path: the base file's own blocks dequantized and requantized, no checkpoint involved
gguf_import.requantize(base, tmp + "/direct.q8_0.gguf")
a, b = GGUFReader(tmp + "/export.q8_0.gguf"), GGUFReader(tmp + "/direct.q8_0.gguf")
differ = [t.name for t, u in zip(a.tensors, b.tensors)
          if (t.name, t.tensor_type) != (u.name, u.tensor_type) or not np.array_equal(t.data, u.data)]
keys = sorted(set(a.fields) ^ set(b.fields))
template = [str(r.fields["tokenizer.chat_template"].contents()) for r in (a, b)]
print(json.dumps({"q8": q8, "f16": f16, "differ": differ, "n": len(a.tensors), "n_direct": len(b.tensors),
                  "keys_differ": keys, "same_template": template[0] == template[1]}))
"""

_GENERATE = """
import json, sys
from llama_cpp import Llama
out = {}
for path in sys.argv[1:]:
    llm = Llama(model_path=path, n_ctx=256, n_threads=1, n_threads_batch=1, verbose=False, seed=0)
    r = llm.create_completion("The three primary colours are", max_tokens=16, temperature=0.0, top_k=1)
    out[path] = r["choices"][0]["text"]
print(json.dumps(out))
"""


def test_an_imported_checkpoint_exports_back_to_the_file_it_came_from_and_generates_the_same(tmp_path):
    base, ckpt = _inputs()
    got = _run(TRAIN_PY, _EXPORT_AND_COMPARE, base, ckpt, str(tmp_path))
    # the import kept the weights exactly, so nothing moved; a wrong name map or permutation would move q/k
    assert got["q8"]["rms_trained"] == 0.0 and got["f16"]["rms_trained"] == 0.0
    assert got["q8"]["tensors"] == got["n"] == got["n_direct"] == 272  # SmolLM2's file: 30 blocks x 9 + 2
    # byte for byte what requantizing the base file's own blocks gives: names, order, types and data
    assert got["differ"] == [] and got["keys_differ"] == [] and got["same_template"]
    # Q8_0 rounding of 4-bit values: below half a step of max|w|/127 in every block, so well under 1e-2 RMS
    assert 0 < got["q8"]["rms_rounding"] < 1e-2
    assert got["f16"]["rms_rounding"] < got["q8"]["rms_rounding"] / 10
    if llama_cpp_python() is None:
        pytest.skip("llama.cpp's server is not built here (make serve-env): the files were checked, not served")
    texts = _run(llama_cpp_python(), _GENERATE, base, str(tmp_path / "export.f16.gguf"))
    original, exported = texts[base], texts[str(tmp_path / "export.f16.gguf")]
    assert original.strip(), "the base model generated nothing"
    assert exported == original  # greedy: the F16 export holds the 4-bit file's values to 3 digits


_REFUSE = """
import json, sys
import numpy as np
from datamind.train import gguf_export
from safetensors import safe_open
base, ckpt, tmp = sys.argv[1:4]
with safe_open(ckpt + "/model.safetensors", framework="np") as fh:
    names = list(fh.keys())
def real(name):
    def load():
        with safe_open(ckpt + "/model.safetensors", framework="np") as fh:
            return fh.get_tensor(name)
    return load
out = {}
for case in ("shape", "missing"):
    tensors = {n: real(n) for n in names}
    if case == "shape":  # a checkpoint of another width: 576 x 576 where SmolLM2's k projection is 192 x 576
        tensors["model.layers.3.self_attn.k_proj.weight"] = lambda: np.zeros((576, 576), np.float32)
    else:
        del tensors["model.layers.7.mlp.up_proj.weight"]
    try:
        gguf_export.write(base, tensors, tmp + "/refused.gguf", tie_embeddings=True)
        out[case] = None
    except ValueError as exc:
        out[case] = str(exc)
import os
out["left"] = sorted(os.listdir(tmp))
print(json.dumps(out))
"""


def test_a_checkpoint_that_does_not_fit_the_base_file_is_refused_naming_the_tensor(tmp_path):
    base, ckpt = _inputs()
    got = _run(TRAIN_PY, _REFUSE, base, ckpt, str(tmp_path))
    assert got["shape"] is not None and "'blk.3.attn_k.weight'" in got["shape"] and "(576, 576)" in got["shape"]
    assert got["missing"] is not None and "'blk.7.ffn_up.weight'" in got["missing"]
    assert got["left"] == []  # nothing half-written where a server would find it
