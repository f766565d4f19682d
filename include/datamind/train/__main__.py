"""Command line: ``python -m datamind.train {export,train} ...`` (also what the launchers run).

Exit status 0 on success, 1 on a training/export failure (message on stderr), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from datamind.settings import Settings
from datamind.storage import DataRoot


def _parse_set(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m datamind.train", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("export", help="write the SFT and RL exports of the dataset")
    e.add_argument("--data-root", default=None, help="default: DATAMIND_DATA_ROOT")
    e.add_argument("--version", default=None, help="export version (default: content hash of the dataset)")
    e.add_argument("--force", action="store_true", help="rewrite even if this version was exported")

    t = sub.add_parser("train", help="run the trainer in this process (torchrun it for several GPUs)")
    t.add_argument("--config", help="JSON config file (local path or URL)")
    t.add_argument("--config-json", help="JSON config inline")
    t.add_argument("--base-model-path")
    t.add_argument("--export-dir")
    t.add_argument("--phase", choices=["sft", "sft+rl"])
    t.add_argument("--run-id")
    t.add_argument("--data-root")
    t.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override, e.g. --set rl.learning_rate=2e-6 (repeatable)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "export":
        from datamind.train.exports import export

        root = DataRoot(args.data_root or Settings.from_env().data_root)
        try:
            result = export(root, version=args.version, force=args.force)
        except ValueError as exc:
            print(f"export failed: {exc}", file=sys.stderr)
            return 1
        print(json.dumps(result.to_dict(), sort_keys=True))
        return 0

    from datamind.train.config import TrainConfig

    data: dict = {}
    if args.config:
        import fsspec

        with fsspec.open(args.config, "rt") as fh:
            data = json.load(fh)
    if args.config_json:
        data = json.loads(args.config_json)
    cfg = TrainConfig.from_dict(data)
    flags = {
        "base_model_path": args.base_model_path,
        "export_dir": args.export_dir,
        "phase": args.phase,
        "run_id": args.run_id,
        "data_root": args.data_root,
    }
    cfg = cfg.with_overrides({k: v for k, v in flags.items() if v is not None} | _parse_set(args.set))

    from datamind.train.protocol import TrainingError
    from datamind.train.trainer import train

    try:
        train(cfg)
    except (TrainingError, ValueError, FileNotFoundError) as exc:
        print(f"training failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
