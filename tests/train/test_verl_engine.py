"""The verl engine: the config and rows the project generates, the reward read from a decoded response,
and -- in verl's own environment (.venv-verl, built by `make test`) -- the config validated by verl's loader
and the tool, turn parser and reward called through verl's interfaces."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datamind.settings import REPO_ROOT
from datamind.train.config import TrainConfig
from datamind.train.engines import Cluster
from datamind.train.exports import RL_FILE
from datamind.train.reward import MatchJudge, score, turns_from_text
from datamind.train.verl_engine import command, node_argv, prepare_rows, rl_config, write_configs

VERL_ENV = Path(os.environ.get("DATAMIND_VERL_ENV") or REPO_ROOT / ".venv-verl")
VERL_PYTHON = VERL_ENV / "bin" / "python"
WORDS = lambda s: len(s.split())  # noqa: E731

# A response as verl decodes it: agent turns and interpreter replies in a row, template role words between.
RIGHT = (
    "<think>Add them.</think><code>print(df.amount.sum())</code>user\n<interpreter>\n42\n</interpreter>\n"
    "assistant\n<think>That is the total.</think><answer>42</answer>"
)


@pytest.mark.parametrize(
    "text, truth, expected",
    [
        (RIGHT, "42", (1.0, 1, 1)),
        (RIGHT.replace("<answer>42<", "<answer>43.2<"), "42", (1.0, 1, 1)),  # 2.9 % off: within the 3 % rule
        (RIGHT.replace("<answer>42<", "<answer>43.3<"), "42", (0.0, 1, 0)),  # 3.1 % off: wrong, well formed
        (RIGHT.replace("</code>", ""), "42", (1.0, 0, 1)),  # eq. 8: a right answer earns its reward, format or not
        (RIGHT.replace("</code>", "").replace("<answer>42<", "<answer>7<"), "42", (-0.1, 0, 0)),  # wrong, malformed
        ("The total is 42.", "42", (-0.1, 0, 0)),  # no tags at all
        ("<think>x</think><code>print(1)</code>user\n<interpreter>\n1\n</interpreter>\n", "1", (-0.1, 0, 0)),
    ],
)
def test_reward_of_a_decoded_response_follows_eq_8(text, truth, expected):
    parts = score(turns_from_text(text), "What is the total?", truth, MatchJudge(), WORDS)
    assert (parts.reward, parts.r_format, parts.r_answer) == expected


def test_long_answers_earn_less_as_in_eq_8():
    long_answer = " ".join(["42"] + ["word"] * 639)  # 640 words: halfway between l_min 256 and l_max 1024
    text = RIGHT.replace("<answer>42<", f"<answer>{long_answer}<")
    parts = score(turns_from_text(text), "q", "42", lambda *a: True, WORDS)
    assert parts.r_length == pytest.approx(0.5 + 0.5 * (1024 - 640) / (1024 - 256))
    assert parts.reward == pytest.approx(parts.r_length)


def test_turns_come_back_from_the_flat_text():
    turns = turns_from_text(RIGHT)
    assert [t["role"] for t in turns] == ["assistant", "tool", "assistant"]
    assert turns[0]["content"] == "<think>Add them.</think><code>print(df.amount.sum())</code>"
    assert turns[1]["content"] == "<interpreter>\n42\n</interpreter>"
    assert turns[2]["content"] == "<think>That is the total.</think><answer>42</answer>"  # role words dropped


def test_config_carries_the_recipe_values():
    cfg = TrainConfig.from_dict(
        {
            "base_model_path": "/models/qwen",
            "export_dir": "/exports/v1",
            "rl": {"group_size": 8, "batch_size": 32, "mini_batch_size": 8, "clip_low": 0.2, "clip_high": 0.28},
            "reward": {"l_min": 128},
        }
    )
    conf = rl_config(cfg, "/w/train.parquet", "/w/tools.yaml", "/w/out", cluster=Cluster(nnodes=2, gpus_per_node=8))
    actor, rollout = conf["actor_rollout_ref"]["actor"], conf["actor_rollout_ref"]["rollout"]
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"]) == (cfg.rl.clip_low, cfg.rl.clip_high)
    assert rollout["n"] == 8 and conf["data"]["train_batch_size"] == 32 and actor["ppo_mini_batch_size"] == 8
    assert actor["use_kl_loss"] is False and conf["algorithm"]["use_kl_in_reward"] is False
    assert conf["algorithm"]["filter_groups"]["enable"] is False  # eq. 5: verl_joint.rl_weights, on "acc"
    assert rollout["multi_turn"]["max_assistant_turns"] == cfg.rl.max_turns
    assert conf["reward"]["custom_reward_function"]["reward_kwargs"]["l_min"] == 128
    assert (conf["trainer"]["nnodes"], conf["trainer"]["n_gpus_per_node"]) == (2, 8)
    # Eq. 7 inside verl: the project's trainer mode, its gamma schedule, the plugins imported by every process.
    assert conf["trainer"]["v1"]["trainer_mode"] == "datamind_sync"
    assert conf["datamind"] == {
        "expert_replay": True,
        "gamma_schedule": "cosine",
        "gamma_peak": cfg.rl.gamma_peak,
        "gamma_valley": 0.05,
    }
    pure_rl = rl_config(cfg.with_overrides({"rl.gamma_peak": 0.0, "rl.gamma_valley": 0.0}), "t", "t", "o")
    assert pure_rl["datamind"]["expert_replay"] is False  # gamma 0 throughout: no expert rows to replay
    env_vars = conf["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env_vars["VERL_USE_EXTERNAL_MODULES"] == "datamind.train.verl_joint" and "include" in env_vars["PYTHONPATH"]
    with pytest.raises(ValueError, match="multiple of rl.mini_batch_size"):
        rl_config(cfg.with_overrides({"rl.mini_batch_size": 5}), "t", "t", "o")


def test_launch_commands(tmp_path, monkeypatch):
    argv, env = command(str(tmp_path), env_dir="/opt/venv-verl")
    assert argv[:3] == ["/opt/venv-verl/bin/python", "-m", "verl.trainer.main_ppo"]
    assert argv[argv.index("--config-path") + 1] == str(tmp_path) and "include" in env["PYTHONPATH"]
    assert env["VERL_USE_EXTERNAL_MODULES"] == "datamind.train.verl_joint"
    assert node_argv(argv, Cluster(nnodes=1, gpus_per_node=8), "/v") == argv  # verl starts its own Ray
    monkeypatch.setenv("DATAMIND_VERL_ENV", "/opt/venv-verl")  # the GPU image's
    assert command(str(tmp_path))[0][0] == "/opt/venv-verl/bin/python"
    assert node_argv(argv, Cluster(nnodes=2, node_rank=1))[0] == "/opt/venv-verl/bin/ray"
    worker = node_argv(argv, Cluster(nnodes=2, gpus_per_node=4, node_rank=1, master_addr="10.0.0.5"), "/v")
    assert worker == ["/v/bin/ray", "start", "--address=10.0.0.5:6379", "--num-gpus=4", "--block"]
    head = node_argv(argv, Cluster(nnodes=2, gpus_per_node=4, node_rank=0), "/v")
    assert head[:2] == ["sh", "-c"] and head[4:] == argv
    assert '"/v/bin/ray" start --head --port=6379 --num-gpus=4' in head[2] and '"/v/bin/ray" stop' in head[2]


def test_the_head_node_stops_ray_and_keeps_the_trainers_exit_code(tmp_path):
    """The head's wrapper, run for real with stand-ins for ray and the trainer: ray is started, the trainer
    runs with its arguments intact, ray is stopped even when the trainer fails, and the failure comes back."""
    env_dir = tmp_path / "env"
    (env_dir / "bin").mkdir(parents=True)
    log = tmp_path / "calls.log"
    ray = env_dir / "bin" / "ray"
    ray.write_text(f'#!/bin/sh\necho "ray $*" >> "{log}"\n')
    ray.chmod(0o755)
    trainer = ["sh", "-c", f'echo "trainer $1" >> "{log}"; exit 3', "trainer", "arg with spaces"]
    head = node_argv(trainer, Cluster(nnodes=2, gpus_per_node=1, node_rank=0), env_dir)
    assert subprocess.run(head).returncode == 3
    assert log.read_text().splitlines() == [
        "ray start --head --port=6379 --num-gpus=1",
        "trainer arg with spaces",
        "ray stop",
    ]


def _export(tmp_path: Path, data_file: Path) -> Path:
    export = tmp_path / "export"
    (export / RL_FILE).parent.mkdir(parents=True)
    rows = [
        {
            "data_source": "datamind",
            "prompt": [{"role": "user", "content": f"question {i}"}],
            "ability": "data_analysis",
            "reward_model": {"style": "rule", "ground_truth": "42"},
            "extra_info": {"index": i, "question": f"question {i}", "data_uri": str(data_file), "data_format": "csv"},
            "target": [
                {"role": "assistant", "content": f"<think>Sum.</think><code>print({i})</code>", "loss_mask": 1},
                {"role": "tool", "content": f"<interpreter>\n{i}\n</interpreter>", "loss_mask": 0},
                {"role": "assistant", "content": f"<think>So.</think><answer>{i}</answer>", "loss_mask": 1},
            ],
        }
        for i in range(3)
    ]
    pq.write_table(pa.Table.from_pylist(rows), export / RL_FILE)
    return export


def test_rows_hand_each_sample_its_data_file_to_the_tool(tmp_path):
    data = tmp_path / "sales.csv"
    data.write_text("region,amount\n")
    out = tmp_path / "verl.parquet"
    export = str(_export(tmp_path, data))
    assert prepare_rows(export, str(out)) == 3
    rows = pq.read_table(out).to_pylist()
    assert {r["agent_name"] for r in rows} == {"datamind_tool_agent"}
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 2]
    kwargs = rows[1]["extra_info"]["tools_kwargs"]["run_code"]["create_kwargs"]
    assert kwargs == {"data_uri": str(data), "data_format": "csv"}
    # The joint loss's expert term: each row carries its own expert continuation, roles and texts intact.
    expert = rows[2]["extra_info"]["expert"]
    assert [m["role"] for m in expert] == ["assistant", "tool", "assistant"]
    assert expert[1]["content"] == "<interpreter>\n2\n</interpreter>" and expert[2]["content"].endswith(
        "<answer>2</answer>"
    )
    assert prepare_rows(export, str(out), with_expert=False) == 3
    assert all(r["extra_info"].get("expert") is None for r in pq.read_table(out).to_pylist())


@pytest.mark.skipif(
    not any(VERL_ENV.glob("lib/python*/site-packages/verl")), reason="verl's environment is not built (make verl-env)"
)
def test_verl_validates_the_config_and_drives_the_tool_parser_and_reward(tmp_path, tiny_model_dir):
    data = tmp_path / "sales.csv"
    data.write_text("region,amount\nnorth,10\nsouth,20\nnorth,5\neast,7\n")
    cfg = TrainConfig.from_dict({"base_model_path": tiny_model_dir, "export_dir": str(tmp_path)})
    conf_dir = write_configs(str(tmp_path), cfg, str(tmp_path / "train.parquet"), str(tmp_path / "out"), Cluster())
    proc = subprocess.run(
        [str(VERL_PYTHON), str(Path(__file__).with_name("verl_checks.py")), conf_dir, str(data), tiny_model_dir],
        capture_output=True,
        text=True,
        timeout=300,
        # The generated command's environment: it is what makes verl import the project's joint-loss module.
        env={**os.environ, **command(conf_dir)[1], "DATAMIND_SANDBOX_WALL_S": "20"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    c = got["config"]
    assert c["clip"] == [cfg.rl.clip_low, cfg.rl.clip_high] and c["n"] == cfg.rl.group_size
    assert c["lr"] == cfg.rl.learning_rate and c["train_batch_size"] == cfg.rl.batch_size
    assert c["format"] == "datamind_react" and c["max_assistant_turns"] == cfg.rl.max_turns
    # Eq. 5 is the trainer's mask (verl's filter would evict a prompt's expert replay with its rollouts).
    assert c["adv_estimator"] == "grpo" and c["filter_groups"] is False
    assert not (c["use_kl_loss"] or c["kl_in_reward"] or c["critic"] or c["reference"])

    reward = got["reward"]
    assert reward["right"]["score"] > 0 and reward["right"]["acc"] == 1.0  # 42.9 vs 42: within 3 %
    assert reward["wrong"] == {"score": 0.0, "acc": 0.0, "format": 1.0, "void": 0.0}
    assert reward["untagged"]["score"] == cfg.reward.format_penalty

    first, second, isolated, hostile, replayed = got["tool"]
    assert first == "<interpreter>\n42\n</interpreter>"  # 10 + 20 + 5 + 7, in the sandbox, on the staged file
    assert second == "<interpreter>\n4\n</interpreter>"  # the trajectory's state carried over
    assert "NameError" in isolated  # another trajectory never sees it
    assert replayed == "<interpreter>\n20\n</interpreter>"  # its session was closed idle; its cells were replayed
    assert hostile.startswith("<interpreter>\nExecution refused by the sandbox")  # the socket never opens

    parser = got["parser"]
    # Code and an answer in one turn: the block that closes first is what the agent committed to (as in
    # the built-in loop, which stops generating at the first closing tag).
    assert parser == {"code": ["print(1 + 1)"], "answer": [], "both": ["print(1)"]}

    joint = got["joint"]
    assert joint["loaded_by_verl"] and joint["trainer"] == "JointSFTTrainer"
    assert joint["gamma"][0] == cfg.rl.gamma_peak and joint["gamma"][-1] == cfg.rl.gamma_valley  # steps 1 and 10
    assert cfg.rl.gamma_valley < joint["gamma"][1] < cfg.rl.gamma_peak
    replay = joint["replay"]
    assert replay["outputs"] == [2, 1] and replay["flags"] == [True, False]  # session 0 adds the expert, flagged
    assert replay["same_fields"] and replay["has_logprobs"]  # one batch per session: the same fields in both
    assert replay["stored"] == [2, True, True]
    # The replay is token for token what verl records when the policy writes those turns and the sandbox answers.
    assert replay["same_prompt"] and replay["same_response"] and replay["same_mask"]
    assert "<code>print(6 * 7)</code>" in replay["agent_text"] and "<answer>42</answer>" in replay["agent_text"]
    assert "<interpreter>" not in replay["agent_text"] and "<interpreter>\n42\n</interpreter>" in replay["env_text"]
    loss = joint["loss"]
    assert loss["joint"]["got"] == pytest.approx(loss["joint"]["want"], rel=1e-6)  # eq. 7, computed by hand
    assert loss["joint"]["shares"] == pytest.approx([4 / 11, 5 / 11])  # expert and DAPO tokens of all 11
    assert [pytest.approx([4 / 11, 5 / 11])] * 2 == loss["shares"]  # nested (TransferQueue) and padded rows
    # An expert token's gradient is -gamma / (expert tokens); its interpreter token, and a filtered rollout, get none.
    assert loss["expert_grads"] == pytest.approx([-0.3 / 4, 0.0, -0.3 / 4, -0.3 / 4])
    assert loss["filtered_grads"] == [0.0, 0.0]
    assert loss["micro_sum"] == pytest.approx(loss["joint"]["got"], rel=1e-6)  # micro-batches add up
    assert loss["pure_rl"]["ours"] == loss["pure_rl"]["verl"]  # gamma 0, DAPO rows only: verl's own loss, exactly
    assert loss["sft_only"]["got"] == pytest.approx(loss["sft_only"]["want"], rel=1e-6)
    assert "extra_fields" in loss["missing"][0] and "datamind_rl_weight" in loss["missing"][1]
    # Eq. 5: prompts a and d have some but not all rollouts right; a's void rollout and its expert replay stay
    # out. Weights N / (K * T_g): 13 DAPO tokens, 2 prompts, a holds 3 + 2 of them and d 4 + 4.
    w_a, w_d = 13 / (2 * 5), 13 / (2 * 8)
    assert loss["rl_weights"] == pytest.approx([0, w_a, w_a, 0, 0, 0, 0, 0, 0, 0, 0, w_d, w_d])
    sizing, first, last = joint["trainer_steps"]  # verl's update step: the workers get this step's loss, then update
    n, mini = cfg.rl.group_size, cfg.rl.mini_batch_size
    assert sizing == {"multiple": mini * (n + 1), "want": mini * (n + 1)}  # n rollouts + the expert per prompt
    assert first["mini_batch_samples"] == mini * (n + 1) and first["n_after"] == last["n_after"] == n
    assert first["order"] == last["order"] == ["set_loss_fn", "update_actor"]
    assert first["loss"] == [True, cfg.rl.gamma_peak, 0.25, 0.5, cfg.rl.clip_high]
    assert last["loss"][1] == cfg.rl.gamma_valley and last["metrics"] == [cfg.rl.gamma_valley, 0.25, 0.125]


@pytest.fixture
def fake_verl_env(tmp_path):
    """A stand-in for verl's environment whose python runs fake_verl_main.py (see there)."""
    import sys

    env_dir = tmp_path / "fake-verl-env"
    (env_dir / "bin").mkdir(parents=True)
    python = env_dir / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).with_name("fake_verl_main.py")}" "$@"\n')
    python.chmod(0o755)
    return env_dir


@pytest.mark.parametrize("fail", [False, True])
def test_a_verl_run_is_recorded_like_any_run(exported, tiny_model_dir, fake_verl_env, fail):
    """Through the local launcher: the generated config and rows reach verl's command line, verl's log lines
    become progress records, its last checkpoint becomes the run's final model; a crash fails the run."""
    from datamind.train.launchers import LaunchError, LocalLauncher, run
    from datamind.train.protocol import progress

    root, result = exported
    cfg = TrainConfig(base_model_path=tiny_model_dir, export_dir=result.export_dir, data_root=root.uri(), engine="verl")
    env = {
        "DATAMIND_VERL_ENV": str(fake_verl_env),
        "CUDA_VISIBLE_DEVICES": "",
        **({"FAKE_VERL_FAIL": "1"} if fail else {}),
    }
    lines: list[str] = []
    if fail:
        with pytest.raises(LaunchError, match="CUDA out of memory"):
            run(LocalLauncher(env=env), cfg, lines.append)
        (run_dir,) = Path(root.path("runs", "train")).iterdir()
        assert json.loads((run_dir / "manifest.json").read_text())["status"] == "failed"
        assert not (run_dir / "checkpoints").exists()
        return
    launched = run(LocalLauncher(env=env), cfg, lines.append)
    steps = [p for p in map(progress, lines) if p]
    assert [(p["step"], p["dapo_loss"], p["reward_mean"]) for p in steps] == [
        (1, 0.5, 0.1),
        (2, 0.25, 0.2),
        (3, 0.5 / 3, 0.1 * 3),
    ]
    assert any("no cold-start SFT" in line for line in lines)  # cold_start is on by default: said, not hidden
    manifest = json.loads(root.read_text("runs", "train", launched.run_id, "manifest.json"))
    assert manifest["status"] == "succeeded" and manifest["engine"] == "verl"
    final = Path(launched.checkpoint_uri.split("://", 1)[-1])
    assert json.loads((final / "verl_run.json").read_text()) == {"steps": 3} and (final / "config.json").exists()
    assert launched.final_metrics["reward_mean"] == pytest.approx(0.3)
