"""Does the data teach? Fine-tune a student on a release and evaluate it against its base, with intervals.

    .venv/bin/python scripts/bench_value.py --student qwen2.5-coder-0.5b-instruct \\
        --dabench ../shared/data/dabench --limit 20 --heldout-limit 10 --steps 30 --lr 1e-5

The student is a model of the local catalogue (``--student``, ``datamind.llm.models``; default the catalogue's
``student``). Training is the project's own ``train_agent`` path with ``engine=llamafactory`` (full SFT on the
release's train split). Base and tuned are both served by llama.cpp from GGUF files written the same way
(``datamind.train.gguf_export`` on the base file's layout, the same weight type), so the only difference between
them is what training changed. Every arm uses the paper's sampling (temperature 0.7, top-p 0.95) and the
``evaluate_agent`` protocol:

- ``nogrammar``: base and tuned on DABench and the release's held-out split; the main comparison: what the
  student learned, a format it has not learned shows as void turns;
- ``grammar``: base and tuned on DABench with the turn grammar: the format imposed, so learning the format is
  told apart from learning the work;
- ``nofile``: the tuned student on DABench with the data file withheld; a correct answer there did not come
  from the data: the leak rate of the benchmark or the release.

Per arm and suite: pass@1, answer rate, runnable code and valid format, each with a 95% Wilson interval (n is
small), and pass@k where trials > 1; then the SFT loss curve and what each part cost.

The SFT cutoff defaults to the longest train conversation (``--cutoff 0``): LLaMA-Factory keeps a longer one's
first turns and drops its answer. At 768 tokens none of the demo release's 191 train conversations (median
1,057 tokens) kept its answer, and the tuned 0.5B student learned the first look and nothing after it.

Resumable: every reply comes from the data root's response cache, an arm whose evaluation was written is read
back, and the tuned checkpoint and both GGUF files are kept under ``<data root>/value/<student>/`` (the tuned
ones in a folder named by the release and the training settings) and reused when present. A benchmark, not a
test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))

from datamind.ids import stable_id  # noqa: E402
from datamind.llm import models  # noqa: E402
from datamind.storage import DataRoot  # noqa: E402

Z95 = 1.959964  # the normal quantile of a two-sided 95% interval
VALUE_DIR = "value"


# -- figures -------------------------------------------------------------------------------------


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials: unlike p +- z*se it stays inside [0, 1] and
    does not collapse to a point at 0 of 20, which is where a small model's pass@1 starts."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def counts(fig: dict, trials: int) -> dict[str, tuple[int, int]]:
    """(successes, n) per measure of an evaluation's suite figures (``evaluate.stage.summarize``). pass@1 counts
    trials (each question's trials taken as independent draws: with 1 trial that is exact), the answer rate
    trials, valid format and runnable code turns, pass@k questions."""
    n_trials = sum(fig["outcomes"].values())
    turns = int(fig.get("turns", 0))
    out = {
        "pass@1": (int(fig["outcomes"].get("correct", 0)), n_trials),
        "answer_rate": (round(fig.get("answer_rate", 0.0) * n_trials), n_trials),
        "runnable_code": (round(fig.get("runnable_code", 0.0) * turns), turns),
        "valid_format": (round(fig.get("valid_format", 0.0) * turns), turns),
    }
    if trials > 1:
        out[f"pass@{trials}"] = (round(fig.get(f"pass@{trials}", 0.0) * fig["n"]), int(fig["n"]))
    return out


def with_intervals(fig: dict, trials: int) -> dict[str, dict]:
    return {
        m: {"k": k, "n": n, "rate": k / n if n else 0.0, "ci95": wilson(k, n)}
        for m, (k, n) in counts(fig, trials).items()
    }


def beats(tuned: dict, base: dict) -> bool:
    """Tuned better than base beyond the intervals: its lower bound above the base's upper bound."""
    return tuned["ci95"][0] > base["ci95"][1]


# -- arms ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    name: str  # nogrammar | grammar | nofile
    model: str  # base | tuned
    suites: dict = field(default_factory=dict)
    grammar: str | None = None
    withhold_data: bool = False

    @property
    def label(self) -> str:
        return f"{self.model}/{self.name}"


def plan_arms(dabench: str, heldout: str | None, grammar: bool = True, nofile: bool = True) -> list[Arm]:
    """The evaluations to run (the loop runs the base's before training, the tuned one's after): the main
    comparison, then the grammar arm and the leak control, which only DABench has (the held-out split's files
    are the release's own: withholding them tests nothing the release could leak, and its format is the one
    training taught)."""
    main = {**({"dabench": dabench} if dabench else {}), **({"heldout": heldout} if heldout is not None else {})}
    if not main:
        raise ValueError("no suite to evaluate: give --dabench and/or keep the held-out split")
    arms = [Arm("nogrammar", m, main) for m in ("base", "tuned")]
    if dabench and grammar:
        arms += [Arm("grammar", m, {"dabench": dabench}, grammar="llama.cpp") for m in ("base", "tuned")]
    if dabench and nofile:
        arms.append(Arm("nofile", "tuned", {"dabench": dabench}, withhold_data=True))
    return arms


# -- what is already there -----------------------------------------------------------------------


@dataclass(frozen=True)
class Paths:
    base_gguf: Path  # the base checkpoint written on the catalogue file's layout, like the tuned one
    run_dir: Path  # one training setting's folder
    checkpoint: Path
    train_record: Path  # the training's result: checkpoint, loss curve, seconds
    tuned_gguf: Path


def paths(root_dir: Path, student: str, train_key: str, gguf_type: str) -> Paths:
    folder = root_dir / VALUE_DIR / student
    run = folder / train_key
    return Paths(folder / f"base.{gguf_type}.gguf", run, run / "checkpoint", run / "train.json",
                 run / f"tuned.{gguf_type}.gguf")  # fmt: skip


def train_key(student: str, version: str, settings: dict) -> str:
    """A training setting's folder name: another release, learning rate or step count never reuses a checkpoint."""
    return f"sft-{stable_id(student, version or 'latest', sorted(settings.items()), length=10)}"


def todo(p: Paths) -> list[str]:
    """The preparation steps a run still has to do, in order; what a cut-short run finished is kept."""
    steps = [] if p.base_gguf.is_file() else ["export_base"]
    trained = p.train_record.is_file() and (p.checkpoint / "config.json").is_file()
    if not trained:
        return [*steps, "train", "export_tuned"]
    fresh = p.tuned_gguf.is_file() and p.tuned_gguf.stat().st_mtime >= (p.checkpoint / "config.json").stat().st_mtime
    return steps if fresh else [*steps, "export_tuned"]


def recorded(root: DataRoot, params) -> dict | None:
    """The summary of an evaluation with exactly these parameters, if one was written (the eval id is their
    hash): a finished arm is read back, not served and replayed again."""
    from datamind.evaluate.stage import written_id

    try:
        return json.loads(root.read_text(f"eval/{written_id(params)}/summary.json"))
    except (OSError, ValueError):
        return None


# -- the parts -----------------------------------------------------------------------------------


def export_gguf(base_gguf: str, checkpoint: str, out: Path, gguf_type: str) -> dict:
    from datamind.llm.local import TRAIN_ENV

    py = Path(os.environ.get("DATAMIND_TRAIN_ENV") or TRAIN_ENV) / "bin" / "python"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(py), "-m", "datamind.train.gguf_export", base_gguf, checkpoint, str(out), "--type", gguf_type]
    env = {**os.environ, "PYTHONPATH": str(REPO / "include"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"gguf_export failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def sft_cutoff(root: DataRoot, args) -> int:
    """``--cutoff``, or the longest train conversation's tokens under the student's chat template (0); says how
    many conversations a given cutoff cuts (LLaMA-Factory keeps their first turns and drops the answer)."""
    from transformers import AutoTokenizer

    from datamind.llm import local
    from datamind.train.exports import SFT_FILE, export
    from datamind.train.llamafactory import conversation_lengths, fit_cutoff

    exp = export(root, version=args.version or None)
    tokenizer = AutoTokenizer.from_pretrained(str(local.prepare(args.student)))
    lengths = sorted(conversation_lengths(os.path.join(root.local_dir(exp.export_dir), SFT_FILE), tokenizer))
    cutoff = args.cutoff or fit_cutoff(lengths)
    cut = sum(n > cutoff for n in lengths)
    print(f"train conversations: {len(lengths)}, tokens median {lengths[len(lengths) // 2]}, longest {lengths[-1]}; "
          f"cutoff {cutoff} cuts {cut}" + ("  <- those lose their last turns, answers included" if cut else ""),
          flush=True)  # fmt: skip
    return cutoff


def train(root: DataRoot, base: str, p: Paths, args) -> dict:
    from datamind.train.config import TrainConfig
    from datamind.train.exports import export
    from datamind.train.llamafactory import run_sft
    from datamind.train.protocol import progress

    exp = export(root, version=args.version or None)
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
    src = Path(root.local_dir(result.checkpoint_uri))
    p.run_dir.mkdir(parents=True, exist_ok=True)
    if p.checkpoint.is_symlink() or p.checkpoint.exists():
        p.checkpoint.unlink()  # a link this script made (a folder here would be someone else's: unlink refuses)
    os.symlink(src, p.checkpoint)  # the run keeps its own copy; this name is how a later run finds it
    record = {"checkpoint_uri": result.checkpoint_uri, "curve": curve, "seconds": round(time.perf_counter() - t0, 1),
              "export": exp.export_dir, "settings": train_settings(args)}  # fmt: skip
    p.train_record.write_text(json.dumps(record, indent=2))
    return record


def train_settings(args) -> dict:
    return {"lr": args.lr, "steps": args.steps, "batch": args.batch, "cutoff": args.cutoff}


def eval_params(arm: Arm, suite: str, gguf: Path, args):
    """The evaluation of one arm on one suite: each suite its own question limit and its own eval id."""
    from datamind.evaluate.params import EvalParams

    return EvalParams(
        checkpoint=str(gguf),
        serve_engine="llama.cpp",
        suites={suite: arm.suites[suite]},
        trials=args.trials,
        limit=args.heldout_limit if suite == "heldout" else args.limit,
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        temperature=0.7,  # the paper's sampling (appendix D), whatever the defaults become
        top_p=0.95,
        grammar=arm.grammar,
        withhold_data=arm.withhold_data,
        # llama-cpp-python decodes one sequence at a time; a second trial in flight runs its code in the sandbox
        # while the first one generates, and the server's prompt store keeps each conversation's prefix
        concurrency=args.concurrency,
    )


def evaluate_arm(root: DataRoot, arm: Arm, gguf: Path, args) -> tuple[dict, float, list[str]]:
    """(figures per suite, seconds, the suites read back from an earlier run) of one arm."""
    from datamind.evaluate.stage import evaluate

    figs, seconds, kept = {}, 0.0, []
    for suite in arm.suites:
        params = eval_params(arm, suite, gguf, args)
        if (done := recorded(root, params)) is not None:
            figs.update(done["suites"])
            kept.append(suite)
            continue
        t0 = time.perf_counter()
        figs.update(evaluate(root, params)["suites"])
        seconds += time.perf_counter() - t0
    return figs, seconds, kept


# -- the loop ------------------------------------------------------------------------------------


def _cell(m: dict) -> str:
    lo, hi = m["ci95"]
    return f"{m['rate']:.2f} [{lo:.2f}, {hi:.2f}] ({m['k']}/{m['n']})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default=str(REPO / "data"), help="a data root holding a release (make demo)")
    ap.add_argument("--student", default=models.with_role("student").name, choices=sorted(models.CATALOGUE),
                    help="the base model, by catalogue name (fetched on first use)")  # fmt: skip
    ap.add_argument("--version", default="", help="release to train on and hold out from ('' = latest)")
    ap.add_argument("--dabench", default="", help="an InfiAgent-DABench folder (e.g. ../shared/data/dabench)")
    ap.add_argument("--limit", type=int, default=20, help="DABench questions")
    ap.add_argument("--heldout-limit", type=int, default=10, help="held-out questions (0: no held-out suite)")
    ap.add_argument("--trials", type=int, default=1, help="trials per question (the paper's protocol: 3)")
    ap.add_argument("--max-turns", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--concurrency", type=int, default=2, help="trials in flight against the one server")
    ap.add_argument("--no-grammar-arm", action="store_true", help="skip the DABench arm with the turn grammar")
    ap.add_argument("--no-nofile-arm", action="store_true", help="skip the no-file leak control")
    ap.add_argument("--steps", type=int, default=30, help="SFT optimizer steps")
    ap.add_argument("--batch", type=int, default=4, help="sequences per SFT step")
    ap.add_argument("--cutoff", type=int, default=0,
                    help="SFT tokens per sequence (0: the longest train conversation's)")  # fmt: skip
    ap.add_argument("--lr", type=float, default=1e-5, help="SFT learning rate")
    ap.add_argument("--gguf-type", default="q8_0", choices=("q8_0", "f16"),
                    help="served weights (gguf_export: q8_0 is faster on a CPU; f16 keeps small updates)")  # fmt: skip
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of the model server and the trainer")
    ap.add_argument("--json", default="", help="also write every figure to this file")
    args = ap.parse_args(argv)
    if args.heldout_limit < 0 or args.limit < 1:
        ap.error("--limit must be >= 1 and --heldout-limit >= 0")

    os.environ["DATAMIND_SERVE_THREADS"] = str(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from datamind.llm import local

    root = DataRoot(args.data_root)
    if not root.is_local:
        ap.error("the value loop keeps checkpoints and GGUF files it serves under a local data root")
    args.cutoff = sft_cutoff(root, args)
    key = train_key(args.student, args.version, train_settings(args))
    p = paths(Path(root.path()).resolve(), args.student, key, args.gguf_type)
    cost: dict[str, float] = {}
    t_all = time.perf_counter()

    t0 = time.perf_counter()
    catalogue_gguf = str(models.fetch(models.get(args.student)))  # assembled once, then found in the cache
    base = str(local.prepare(args.student))
    cost["fetch and import"] = time.perf_counter() - t0
    steps = todo(p)
    print(f"student {args.student}; {p.run_dir}; to do: {', '.join(steps) or 'nothing (all kept)'}", flush=True)
    exports: dict[str, dict] = {}
    if "export_base" in steps:
        t0 = time.perf_counter()
        exports["base"] = export_gguf(catalogue_gguf, base, p.base_gguf, args.gguf_type)
        cost["base export"] = time.perf_counter() - t0
    heldout = (args.version or "") if args.heldout_limit > 0 else None
    dabench = str(Path(args.dabench).resolve()) if args.dabench else ""  # the eval id holds it: not cwd-relative
    arms = plan_arms(dabench, heldout, not args.no_grammar_arm, not args.no_nofile_arm)
    results: dict[str, dict] = {}

    def run_arms(model: str) -> None:
        for arm in (a for a in arms if a.model == model):
            print(f"evaluating {arm.label} on {', '.join(arm.suites)} ...", flush=True)
            figs, seconds, kept = evaluate_arm(root, arm, p.base_gguf if model == "base" else p.tuned_gguf, args)
            cost[f"eval {arm.label}"] = seconds
            results[arm.label] = {
                s: with_intervals(f, args.trials) | {"outcomes": f["outcomes"]} for s, f in figs.items()
            }
            if kept:
                print(f"  ({', '.join(kept)} read back from an earlier run's evaluation)", flush=True)

    # the base's arms first: a loop cut short in training (which keeps no partial checkpoint) keeps them
    run_arms("base")
    if "train" in steps:
        print("fine-tuning (LLaMA-Factory full SFT on the release's train split) ...", flush=True)
        t0 = time.perf_counter()
        train(root, base, p, args)
        cost["training"] = time.perf_counter() - t0
    record = json.loads(p.train_record.read_text())
    if "export_tuned" in steps:
        t0 = time.perf_counter()
        exports["tuned"] = export_gguf(catalogue_gguf, str(p.checkpoint), p.tuned_gguf, args.gguf_type)
        cost["tuned export"] = time.perf_counter() - t0
        e = exports["tuned"]
        print(f"tuned export: training moved the weights {e['rms_trained']:.2e} RMS, {args.gguf_type} rounding "
              f"{e['rms_rounding']:.2e}" + ("  <- the update is below the rounding: try --gguf-type f16"
                                              if e["rms_trained"] < e["rms_rounding"] else ""), flush=True)  # fmt: skip
    run_arms("tuned")

    measures = ["pass@1", "answer_rate", "runnable_code", "valid_format"]
    measures += [f"pass@{args.trials}"] if args.trials > 1 else []
    print("\n95% Wilson intervals; pass@1 and answer rate over trials, format and code over turns.\n")
    print("| arm | suite | " + " | ".join(measures) + " |")
    print("|---|---|" + "---|" * len(measures))
    for label, suites in results.items():
        for suite, fig in sorted(suites.items()):
            print(f"| {label} | {suite} | " + " | ".join(_cell(fig[m]) for m in measures) + " |")
    verdicts = []
    for name in ("nogrammar", "grammar"):
        for suite, t in results.get(f"tuned/{name}", {}).items():
            b = results.get(f"base/{name}", {}).get(suite)
            if b:
                said = "beats the base beyond the intervals" if beats(t["pass@1"], b["pass@1"]) else "not beyond them"
                verdicts.append(f"{name} {suite}: tuned {_cell(t['pass@1'])} vs base {_cell(b['pass@1'])}: {said}")
    print("\npass@1, tuned against base:\n  " + "\n  ".join(verdicts))
    if (leak := results.get("tuned/nofile", {}).get("dabench")) is not None:
        print(f"\nleak rate (tuned, DABench, data file withheld, answered correctly anyway): {_cell(leak['pass@1'])}")
    curve = record.get("curve", [])
    print(
        "\nSFT loss curve (step: loss @ seconds):", ", ".join(f"{c['step']}: {c['loss']:.3f} @ {c['t']}" for c in curve)
    )
    print(f"training settings: {record.get('settings')} ({record.get('seconds', 0):.0f} s when it ran)")
    print("\ncost (seconds; 0 = kept from an earlier run): " + ", ".join(f"{k} {v:.0f}" for k, v in cost.items())
          + f"; total {time.perf_counter() - t_all:.0f}")  # fmt: skip
    if args.json:
        doc = {"student": args.student, "train": record, "exports": exports, "results": results, "cost": cost}
        Path(args.json).write_text(json.dumps(doc, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
