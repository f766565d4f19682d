"""End to end on CPU: a tiny random Llama trained through cold-start SFT and SFT + DAPO."""

import json
import math

import pyarrow.parquet as pq
import pytest
import torch

from datamind.train.config import TrainConfig
from datamind.train.rollout import Trajectory
from datamind.train.tokenization import collate, encode
from datamind.train.trainer import TrainingError, load_samples, train

FILTERED = "s02"  # every rollout of this prompt is right: its group has no reward spread
WITH_VOID = "s00"  # one rollout of this prompt has a void turn


def _turns(answer):
    return [
        {"role": "assistant", "content": "<think>Check.</think><code>print(0)</code>"},
        {"role": "tool", "content": "<interpreter>\n0\n</interpreter>"},
        {"role": "assistant", "content": f"<think>Sure.</think><answer>{answer}</answer>"},
    ]


class ScriptedRollout:
    """A Rollout whose trajectories are fixed: one right ("alpha"), the rest wrong ("omega")."""

    def __call__(self, prompt, *, group_size, generate, execute):
        answers = ["alpha"] * group_size if prompt.sample_id == FILTERED else ["alpha"] + ["omega"] * (group_size - 1)
        trajs = [Trajectory(_turns(a), "answered", 2) for a in answers]
        if prompt.sample_id == WITH_VOID:
            trajs[-1] = Trajectory([{"role": "assistant", "content": "<think>hmm</think>"}], "void", 1, 1)
        return trajs


def alpha_judge(question, prediction, ground_truth):
    return prediction == "alpha"  # unrelated to the expert answers, so SFT cannot explain a shift


def _config(model_dir, res, root, **over):
    base = {
        "base_model_path": model_dir,
        "export_dir": res.export_dir,
        "data_root": root.url,
        "phase": "sft+rl",
        "sft": {"learning_rate": 3e-3, "batch_size": 4, "micro_batch_size": 2, "epochs": 100, "max_steps": 6},
        "rl": {
            "learning_rate": 2e-3,
            "epochs": 100,
            "batch_size": 4,
            "mini_batch_size": 2,
            "micro_batch_size": 4,
            "warmup_steps": 0,
            "max_steps": 4,
        },
    }
    return TrainConfig.from_dict(base).with_overrides(over)


def _margin(model_dir, tokenizer, prompt):
    """Summed log-prob of the right rollout minus the mean over wrong ones (agent tokens only)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    encs = [encode(tokenizer, prompt + _turns(a), len(prompt)) for a in ("alpha", "omega")]
    batch = collate(encs, tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    seq = (logp * batch.agent_mask).sum(-1)
    return float(seq[0] - seq[1])


def test_sft_then_sft_rl(tiny_model_dir, tokenizer, exported):
    root, res = exported
    lines = []
    result = train(_config(tiny_model_dir, res, root), rollout=ScriptedRollout(), judge=alpha_judge, emit=lines.append)

    metrics = pq.read_table(result.metrics_uri)
    assert metrics.schema.metadata[b"datamind.table"] == b"train_metrics"
    rows = metrics.to_pylist()
    sft = [r for r in rows if r["phase"] == "sft"]
    rl = [r for r in rows if r["phase"] == "sft+rl"]
    assert len(sft) == 6 and len(rl) == 4 and [r["global_step"] for r in rows] == list(range(1, 11))

    # Phase 1 memorises the expert data: agent-token NLL falls.
    assert sft[-1]["sft_loss"] < sft[0]["sft_loss"] - 0.5

    # Phase 2 bookkeeping, worked out by hand: each step sees all 4 prompts once.
    assert [r["gamma"] for r in rl] == pytest.approx([0.05 + 0.425 * (1 + math.cos(math.pi * k / 3)) for k in range(4)])
    assert all(r["filtered_group_frac"] == pytest.approx(1 / 4) for r in rl)
    assert all(r["void_turn_frac"] == pytest.approx(1 / 16) for r in rl)
    # rewards: (1, 0, 0, -0.1) -- the void rollout breaks the format --, twice (1, 0, 0, 0), once (1, 1, 1, 1)
    assert all(r["reward_mean"] == pytest.approx((0.9 + 1 + 1 + 4) / 16) for r in rl)
    assert all(r["dapo_loss"] is not None and 0 <= r["clip_frac"] <= 1 and r["entropy"] > 0 for r in rl)
    for r in rl:
        assert r["loss"] == pytest.approx(r["gamma"] * r["sft_loss"] + (1 - r["gamma"]) * r["dapo_loss"], rel=1e-4)

    # Phase 2 moves probability toward the rewarded rollout; pure SFT (gamma = 1) does not do so as much.
    prompt = load_samples(res.export_dir)[0][1].prompt
    ckpt_dir = result.checkpoint_uri.rsplit("/", 1)[0]
    gained = _margin(f"{ckpt_dir}/final", tokenizer, prompt) - _margin(f"{ckpt_dir}/sft", tokenizer, prompt)
    assert gained > 1.0

    sft_only = train(
        _config(tiny_model_dir, res, root, **{"rl.gamma_peak": 1.0, "rl.gamma_valley": 1.0}),
        rollout=ScriptedRollout(),
        judge=alpha_judge,
        emit=lambda _: None,
    )
    base = sft_only.checkpoint_uri.rsplit("/", 1)[0]
    control = _margin(f"{base}/final", tokenizer, prompt) - _margin(f"{base}/sft", tokenizer, prompt)
    assert gained > control + 1.0

    # Outputs: checkpoints complete and loadable, manifest, progress/result lines.
    for tag in ("sft", "final"):
        meta = json.load(open(f"{ckpt_dir}/{tag}/checkpoint.json"))
        assert meta["dataset_version"] == res.version and "config.json" in meta["files"]
    manifest = json.load(open(result.manifest_uri))
    assert manifest["status"] == "succeeded" and manifest["result"]["checkpoint_uri"] == result.checkpoint_uri
    assert manifest["dataset_version"] == res.version
    assert sum(line.startswith("DATAMIND_PROGRESS ") for line in lines) == 10
    assert json.loads(lines[-1].removeprefix("DATAMIND_RESULT "))["run_id"] == result.run_id
    assert result.final_metrics["phase"] == "sft+rl" and result.final_metrics["step"] == 4


def test_real_policy_rollouts_with_random_model(tiny_model_dir, exported):
    """The built-in loop with HF generation: a random model writes garbage, so every group is filtered
    and the step trains on the SFT term alone."""
    root, res = exported
    cfg = _config(
        tiny_model_dir,
        res,
        root,
        cold_start=False,
        **{
            "rl.batch_size": 2,
            "rl.mini_batch_size": 2,
            "rl.group_size": 2,
            "rl.max_steps": 1,
            "rl.max_turn_tokens": 12,
            "rl.max_turns": 2,
        },
    )
    result = train(cfg, emit=lambda _: None)
    (row,) = pq.read_table(result.metrics_uri).to_pylist()
    assert row["phase"] == "sft+rl" and row["format_rate"] == 0.0 and row["answer_acc"] == 0.0
    assert row["filtered_group_frac"] == 1.0 and row["dapo_loss"] is None
    assert row["loss"] == pytest.approx(row["gamma"] * row["sft_loss"], rel=1e-5)


def test_bad_model_path_fails_and_is_recorded(exported, tmp_path):
    root, res = exported
    cfg = TrainConfig.from_dict(
        {
            "base_model_path": str(tmp_path / "nope"),
            "export_dir": res.export_dir,
            "data_root": root.url,
            "phase": "sft",
            "run_id": "r-bad",
        }
    )
    with pytest.raises(TrainingError, match="not a local directory"):
        train(cfg, emit=lambda _: None)
    manifest = json.loads(root.read_text("runs/train/r-bad/manifest.json"))
    assert manifest["status"] == "failed" and "not a local directory" in manifest["error"]


def test_one_update_dapo_value_matches_hand_computation(tiny_model_dir, tokenizer, exported):
    """With one update per step pi == pi_old, so every ratio is 1 and the DAPO loss is
    -(1/K) * sum_g [sum_j A_gj * T_gj / sum_j T_gj] over kept groups and non-void rollouts."""
    import statistics

    root, res = exported
    cfg = _config(tiny_model_dir, res, root, cold_start=False, **{"rl.max_steps": 1, "rl.mini_batch_size": 4})
    result = train(cfg, rollout=ScriptedRollout(), judge=alpha_judge, emit=lambda _: None)
    (row,) = pq.read_table(result.metrics_uri).to_pylist()

    prompt = load_samples(res.export_dir)[0][1].prompt
    t_alpha, t_omega = (sum(encode(tokenizer, prompt + _turns(a), len(prompt)).agent_mask) for a in ("alpha", "omega"))

    def adv(rewards):
        m, s = statistics.mean(rewards), statistics.stdev(rewards)
        return [(r - m) / s for r in rewards]

    plain = adv([1, 0, 0, 0])  # s01, s03
    plain_mean = (plain[0] * t_alpha + sum(plain[1:]) * t_omega) / (t_alpha + 3 * t_omega)
    void = adv([1, 0, 0, -0.1])[:3]  # s00: its void rollout (-0.1) is normalised with the group, then dropped
    void_mean = (void[0] * t_alpha + sum(void[1:]) * t_omega) / (t_alpha + 2 * t_omega)
    assert row["clip_frac"] == 0.0
    assert row["dapo_loss"] == pytest.approx(-(2 * plain_mean + void_mean) / 3, abs=1e-4)


def test_every_engine_the_config_names_is_run_by_the_built_in_trainer_or_a_registered_one(monkeypatch, tmp_path):
    from datamind.train import trainer
    from datamind.train.config import ENGINES

    assert set(trainer.EXTERNAL_ENGINES) | {"builtin"} == set(ENGINES)
    ran = []
    monkeypatch.setitem(trainer.EXTERNAL_ENGINES, "verl", lambda cfg, emit: ran.append((cfg.engine, emit)) or "done")
    cfg = TrainConfig.from_dict(
        {"base_model_path": str(tmp_path), "export_dir": str(tmp_path), "engine": "verl", "phase": "sft+rl"}
    )
    assert train(cfg, emit=print) == "done" and ran == [("verl", print)]
