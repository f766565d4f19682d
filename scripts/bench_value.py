"""Does the data teach? Evaluate the local base model, fine-tune it on a release, evaluate the tuned checkpoint.

    .venv/bin/python scripts/bench_value.py --data-root data            # a release from `make demo`
    .venv/bin/python scripts/bench_value.py --steps 60 --limit 20 --trials 3 --dabench ../shared/data/dabench

The base model is a student from the local models' catalogue (``--student``, ``datamind.llm.models``; default
SmolLM2-135M-Instruct, which make install brings). Training is the project's own
``train_agent`` path with ``engine=llamafactory`` (full SFT on the release's train split); both models are
served by the same server (``transformers serve``, no grammar: a format the model has not learned shows as
void turns) and evaluated with the same protocol, suites and sampling (``evaluate_agent``). It prints, per
model and suite: valid-format turns, runnable code, answer rate, pass@1 and pass@k (k = trials), then the SFT
loss curve and what each step cost. A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))

from datamind.llm import models  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402


def evaluate_model(root: DataRoot, checkpoint: str, args) -> tuple[dict, dict, float]:
    from datamind.evaluate.params import EvalParams
    from datamind.evaluate.stage import evaluate

    suites = {"heldout": args.version or ""}
    if args.dabench:
        suites["dabench"] = args.dabench
    params = {
        "checkpoint": checkpoint,
        "serve_engine": "transformers",
        "suites": suites,
        "trials": args.trials,
        "limit": args.limit,
        "max_turns": args.max_turns,
        "max_tokens": args.max_tokens,
        "concurrency": 1,  # one CPU server: requests queue there anyway
    }
    t0 = time.perf_counter()
    # per suite: pass@k, outcomes and how the agent worked (evaluate.behaviour)
    summary = evaluate(root, EvalParams.from_form(params))
    return summary["suites"], summary, time.perf_counter() - t0


def train(root: DataRoot, base: str, args) -> tuple[str, list[dict], float]:
    from datamind.train.config import TrainConfig
    from datamind.train.exports import export
    from datamind.train.llamafactory import run_sft
    from datamind.train.protocol import progress

    exp = export(root, version=None)
    cfg = TrainConfig.from_dict(
        {
            "base_model_path": base,
            "export_dir": exp.export_dir,
            "phase": "sft",
            "engine": "llamafactory",
            "template": models.get(args.student).template,
            "data_root": root.uri(""),
            "device": "cpu",
            "dtype": "float32",
            "sft": {
                "learning_rate": args.lr,
                "batch_size": args.batch,
                "micro_batch_size": 1,
                "epochs": 1.0,
                "cutoff_len": args.cutoff,
                "max_steps": args.steps,
                "warmup_ratio": 0.1,
            },
        }
    )
    curve: list[dict] = []
    t0 = time.perf_counter()

    def emit(line: str) -> None:
        if (fields := progress(line)) is not None:
            curve.append({**fields, "t": round(time.perf_counter() - t0, 1)})
            print(f"  step {fields.get('step')}: loss {fields.get('loss')}", flush=True)

    result = run_sft(cfg, emit=emit)
    return root.local_dir(result.checkpoint_uri), curve, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default=str(REPO / "data"), help="a data root holding a release (make demo)")
    ap.add_argument("--student", default=models.DEFAULT_LOCAL_MODEL, choices=sorted(models.CATALOGUE),
                    help="the base model, by catalogue name (fetched on first use)")  # fmt: skip
    ap.add_argument("--version", default="", help="release to train on and hold out from ('' = latest)")
    ap.add_argument("--dabench", default="", help="an InfiAgent-DABench folder (e.g. ../shared/data/dabench)")
    ap.add_argument("--limit", type=int, default=5, help="questions per suite")
    ap.add_argument("--trials", type=int, default=1, help="trials per question (the paper's protocol: 3)")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30, help="SFT optimizer steps")
    ap.add_argument("--batch", type=int, default=4, help="sequences per SFT step")
    ap.add_argument("--cutoff", type=int, default=1024, help="SFT tokens per sequence")
    ap.add_argument("--lr", type=float, default=1e-4, help="SFT learning rate (the 7B recipe's 1e-5 barely moves 135M)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of the model server and the trainer")
    ap.add_argument("--json", default="", help="also write every figure to this file")
    args = ap.parse_args(argv)

    os.environ["DATAMIND_SERVE_THREADS"] = str(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from datamind.llm import local

    root = DataRoot(args.data_root)
    t0 = time.perf_counter()
    base = str(local.prepare(args.student))
    prep = time.perf_counter() - t0
    print(f"base checkpoint {base} ({prep:.0f} s)", flush=True)
    print("evaluating the base model ...", flush=True)
    base_fig, _, base_wall = evaluate_model(root, base, args)
    print("fine-tuning (LLaMA-Factory SFT on the release's train split) ...", flush=True)
    tuned, curve, train_wall = train(root, base, args)
    print("evaluating the tuned model ...", flush=True)
    tuned_fig, _, tuned_wall = evaluate_model(root, tuned, args)

    cols = tuple(
        dict.fromkeys(("n", "turns", "valid_format", "runnable_code", "answer_rate", "pass@1", f"pass@{args.trials}"))
    )
    print("\n| model | suite | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for name, fig in (("base", base_fig), ("tuned", tuned_fig)):
        for suite in sorted(fig):
            f = fig[suite]
            cells = [f"{f.get(c, 0):.3f}" if isinstance(f.get(c), float) else str(f.get(c, "")) for c in cols]
            print(f"| {name} | {suite} | " + " | ".join(cells) + " |")
    print("\noutcomes:", json.dumps({"base": {s: f["outcomes"] for s, f in base_fig.items()},
                                     "tuned": {s: f["outcomes"] for s, f in tuned_fig.items()}}))  # fmt: skip
    points = ", ".join(f"{c['step']}: {c['loss']:.3f} @ {c['t']}" for c in curve)
    print("\nSFT loss curve (step: loss @ seconds):", points)
    steps = len(curve) or 1
    print(f"\ncost: import {prep:.0f} s, base eval {base_wall:.0f} s, training {train_wall:.0f} s "
          f"({train_wall / steps:.1f} s a step of {args.batch} sequences, cutoff {args.cutoff}), "
          f"tuned eval {tuned_wall:.0f} s, total {time.perf_counter() - t0:.0f} s")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"base": base_fig, "tuned": tuned_fig, "curve": curve}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
