"""Stands in for ``python -m verl.trainer.main_ppo`` where no GPU is (verl's rollouts need vLLM/SGLang on
one): it takes verl's command line, reads the Hydra config the project wrote, checks the rows it points
at, prints verl's console-logger lines and leaves verl's checkpoint layout (the base model's files as the
"trained" Hugging Face model). It trains nothing; it tests the project's side of the protocol."""

import json
import os
import shutil
import sys

import pyarrow.parquet as pq
import yaml

args = sys.argv[1:]
assert args[:2] == ["-m", "verl.trainer.main_ppo"], args
conf_path = os.path.join(args[args.index("--config-path") + 1], args[args.index("--config-name") + 1] + ".yaml")
with open(conf_path) as fh:
    conf = yaml.safe_load(fh)
assert conf["defaults"][0] == "ppo_trainer"
rows = pq.read_table(conf["data"]["train_files"]).to_pylist()
assert rows and all(r["agent_name"] == "datamind_tool_agent" for r in rows)
assert all(r["extra_info"]["expert"][-1]["role"] == "assistant" for r in rows)  # the joint loss's expert turns
assert conf["trainer"]["v1"]["trainer_mode"] == "datamind_sync"
assert os.environ["VERL_USE_EXTERNAL_MODULES"] == "datamind.train.verl_joint"
assert all(
    r["extra_info"]["tools_kwargs"]["run_code"]["create_kwargs"]["data_uri"] == (r["extra_info"]["data_uri"] or "")
    for r in rows
)
print(f"[fake verl] {len(rows)} rows, group size {conf['actor_rollout_ref']['rollout']['n']}", flush=True)
steps = int(os.environ.get("FAKE_VERL_STEPS", "3"))
for step in range(1, steps + 1):
    print(f"step:{step} - actor/pg_loss:{0.5 / step} - critic/score/mean:{0.1 * step} - timing_s/gen:1.5", flush=True)
if os.environ.get("FAKE_VERL_FAIL"):
    print("RuntimeError: CUDA out of memory", flush=True)
    sys.exit(1)
hf = os.path.join(conf["trainer"]["default_local_dir"], f"global_step_{steps}", "actor", "huggingface")
shutil.copytree(conf["actor_rollout_ref"]["model"]["path"], hf)
with open(os.path.join(hf, "verl_run.json"), "w") as fh:
    json.dump({"steps": steps}, fh)
