"""RL rollouts on the CPU path: prompts one after another (cells of a turn run one at a time, the policy
waits for them) against the asynchronous batch (cells of all prompts run on ``exec_workers`` threads while
the prompts whose cells are done generate their next turn).

    .venv/bin/python scripts/bench_rollout_overlap.py [--prompts 8] [--group 4] [--gen-s 0.2] [--repeats 3]

Cells run in the project sandbox (the trainer's default executor) on a small CSV; the policy is scripted
(three code turns, then an answer) and sleeps ``--gen-s`` per batched call, standing in for a generation
step on an accelerator whose cost barely depends on the batch. Prints medians of interleaved rounds, the
ratio, and where the asynchronous run's time went (generation, summed cell time, wall).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from datamind.sandbox import SandboxLimits
from datamind.train.rollout import AgentLoopRollout, RolloutPrompt
from datamind.train.sandbox_exec import SandboxExecutor

CELLS = [
    "import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df.shape)",
    "print(df.groupby('region')['amount'].agg(['sum', 'mean']).round(2))",
    "print(df['amount'].describe().round(3).to_string())",
]


class Policy:
    def __init__(self, gen_s: float):
        self.gen_s = gen_s

    def __call__(self, conversations, max_new_tokens):
        time.sleep(self.gen_s)
        out = []
        for conv in conversations:
            turn = sum(m["role"] == "assistant" for m in conv)
            out.append(
                f"<think>Step {turn + 1}.</think><code>{CELLS[turn]}</code>"
                if turn < len(CELLS)
                else "<think>Done.</think><answer>ok</answer>"
            )
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--gen-s", type=float, default=0.2)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-overlap-") as tmp:
        csv = os.path.join(tmp, "sales.csv")
        with open(csv, "w") as fh:
            fh.write("region,amount\n" + "".join(f"r{i % 7},{i * 3.5}\n" for i in range(500)))
        prompts = [
            RolloutPrompt(f"p{i}", [{"role": "user", "content": f"q{i}"}], f"q{i}", "ok", csv, "csv")
            for i in range(args.prompts)
        ]
        count = lambda s: len(s.split())  # noqa: E731
        with SandboxExecutor(SandboxLimits.from_env()) as sandbox:
            sequential = AgentLoopRollout(count, exec_workers=1, workdir_root=tmp)
            overlapped = AgentLoopRollout(count, exec_workers=args.workers, workdir_root=tmp)
            policy = Policy(args.gen_s)

            def one_by_one():
                for p in prompts:
                    sequential(p, group_size=args.group, generate=policy, execute=sandbox)

            def batch():
                overlapped.batch(prompts, group_size=args.group, generate=policy, execute=sandbox)

            batch()  # warm the sandbox (its zygote imports pandas once)
            rounds = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                one_by_one()
                t1 = time.perf_counter()
                batch()
                t2 = time.perf_counter()
                rounds.append((t1 - t0, t2 - t1, overlapped.last_stats))
    seq = statistics.median(r[0] for r in rounds)
    asy = statistics.median(r[1] for r in rounds)
    ratio = statistics.median(r[0] / r[1] for r in rounds)
    st = rounds[len(rounds) // 2][2]
    print(
        f"{args.prompts} prompts x G={args.group}, {len(CELLS)} cells each, generation {args.gen_s:g} s per call, "
        f"{os.cpu_count()} CPUs, medians of {args.repeats} interleaved rounds"
    )
    print(f"  prompt by prompt (old loop): {seq:7.2f} s")
    print(f"  asynchronous batch:          {asy:7.2f} s   speed-up {ratio:.2f}x")
    print(
        f"  batch breakdown: {st.generate_calls} generate calls, {st.generate_s:.2f} s generating, "
        f"{st.cells} cells, {st.execute_s:.2f} s of cell time, {st.wall_s:.2f} s wall "
        f"(overlap factor {(st.generate_s + st.execute_s) / st.wall_s:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
