"""Benchmark the trainer's step time: SFT steps and SFT+DAPO steps (scripted rollouts, so it measures the
loss / backward / optimizer path, not generation), plus the cost of building agent masks.

    .venv/bin/python scripts/bench_train.py                       # tiny random Llama, built locally, CPU
    .venv/bin/python scripts/bench_train.py --model /models/qwen2.5-coder-1.5b --device cuda

Prints medians over steps (the first step of each phase, which includes warm-up, is excluded).
Reuses the test suite's tokenizer builder and sample conversations (tests/train/conftest.py), which also
pins CPU runs to one intra-op thread (OMP_NUM_THREADS=1) unless the variable is already set.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "train"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="local model dir (default: a tiny random Llama)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--samples", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        run_bench(args, tmp)


def run_bench(args, tmp: str) -> None:
    import pyarrow.parquet as pq
    from train_helpers import QUESTIONS, build_tokenizer, conversation, write_dataset  # the tests' tokenizer + data

    from datamind.storage import DataRoot
    from datamind.train.config import TrainConfig
    from datamind.train.exports import export
    from datamind.train.rollout import Trajectory
    from datamind.train.tokenization import encode
    from datamind.train.trainer import train

    tok = build_tokenizer()
    model = args.model
    if not model:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        model = f"{tmp}/model"
        cfg = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=256,
            intermediate_size=512,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            bos_token_id=None,
        )
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).save_pretrained(model)
        tok.save_pretrained(model)
    root = DataRoot(f"{tmp}/root")
    rows = []
    for i in range(args.samples):
        q, code, out, ans = QUESTIONS[i % len(QUESTIONS)]
        rows.append(
            {
                "sample_id": f"s{i:03d}",
                "query_id": f"q{i}",
                "trajectory_id": f"t{i}",
                "file_id": "f",
                "category": "c",
                "hop": 1,
                "question": q,
                "messages": conversation(q, code, out, ans),
                "final_answer": ans,
                "created_at": datetime.now(UTC),
            }
        )
    write_dataset(root, rows, shard_size=len(rows))
    res = export(root)

    class Scripted:
        def __call__(self, prompt, *, group_size, generate, execute):
            return [
                Trajectory(conversation("", "print(0)", "0", a)[2:], "answered", 2)
                for a in ["alpha"] + ["omega"] * (group_size - 1)
            ]

    n = args.samples
    cfg = TrainConfig.from_dict(
        {
            "base_model_path": model,
            "export_dir": res.export_dir,
            "data_root": root.url,
            "device": args.device,
            "sft": {"batch_size": n, "micro_batch_size": 4, "epochs": 1000, "max_steps": args.steps},
            "rl": {
                "batch_size": n,
                "mini_batch_size": n // 2,
                "micro_batch_size": 4,
                "epochs": 1000,
                "max_steps": args.steps,
                "warmup_steps": 0,
            },
        }
    )
    result = train(cfg, rollout=Scripted(), judge=lambda q, p, g: p == "alpha", emit=lambda _: None)
    metrics = pq.read_table(result.metrics_uri).to_pylist()
    for phase in ("sft", "sft+rl"):
        rows_ = [m for m in metrics if m["phase"] == phase][1:]
        t = statistics.median(m["step_time_s"] for m in rows_)
        tokens = statistics.median(m["n_tokens"] for m in rows_)
        print(
            f"{phase:7s} median step {t * 1000:8.1f} ms  trained tokens/step {tokens:6.0f}  "
            f"tokens/s {tokens / t:8.0f}  ({len(rows_)} steps, {n} prompts/step)"
        )

    # Mask building: rendering prefixes costs O(turns^2) template renders; measure how it grows.
    for turns in (2, 8, 16):
        msgs = conversation(*QUESTIONS[0])[:2]
        for k in range(turns):
            msgs += [
                {"role": "assistant", "content": f"<think>step {k}</think><code>print({k})</code>"},
                {"role": "tool", "content": f"<interpreter>\n{k}\n</interpreter>"},
            ]
        msgs.append({"role": "assistant", "content": "<think>done</think><answer>1</answer>"})
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            encode(tok, msgs, 2)
            times.append(time.perf_counter() - t0)
        print(f"encode  {turns:2d} code turns: median {statistics.median(times) * 1000:6.2f} ms")


if __name__ == "__main__":
    main()
