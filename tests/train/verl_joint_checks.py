"""The joint SFT+RL pieces (``datamind.train.verl_joint``) called the way verl calls them; run by verl's own
Python from verl_checks.py (which returns this module's results under ``"joint"``)."""

from __future__ import annotations

import asyncio
import json
import math

import torch

# A conversation whose code the sandbox really runs: the expert's interpreter turn is what the tool answers.
QUESTION = [{"role": "user", "content": "What is six times seven? The data is in sales.csv."}]
EXPERT = [
    {"role": "assistant", "content": "<think>Multiply.</think><code>print(6 * 7)</code>"},
    {"role": "tool", "content": "<interpreter>\n42\n</interpreter>"},
    {"role": "assistant", "content": "<think>That is it.</think><answer>42</answer>"},
]


def checks(config, data_file: str, tokenizer_dir: str) -> dict:
    import sys

    from verl.trainer.ppo.v1 import get_trainer_cls

    out: dict = {}
    # VERL_USE_EXTERNAL_MODULES made `import verl` load the project's module: the configured mode resolves
    # before anything here imports it.
    out["loaded_by_verl"] = "datamind.train.verl_joint" in sys.modules
    out["trainer"] = get_trainer_cls(config.trainer.v1.trainer_mode).__name__

    from datamind.train import verl_joint

    total = 10
    out["gamma"] = [verl_joint.step_gamma(config, s, total) for s in (1, 5, 10)]
    out["replay"] = asyncio.run(_replay(config, data_file, tokenizer_dir))
    out["loss"] = _loss(config)
    out["trainer_steps"] = _trainer_steps(config)
    return out


def _trainer_steps(config) -> list[dict]:
    """verl's own ``_update_actor`` of the project's trainer, with a recorder for the GPU actor workers: before
    each update the workers get the step's loss (gamma from the schedule, the batch's expert share)."""
    import pickle
    import types

    from datamind.train.verl_joint import JointLoss, JointSFTTrainer

    class Workers:  # what the driver calls on the actor worker group
        def __init__(self):
            self.calls = []

        def set_loss_fn(self, loss_fn):
            self.calls.append(("set_loss_fn", pickle.loads(pickle.dumps(loss_fn))))  # (Ray pickles it)

        def update_actor(self, batch):
            self.calls.append(("update_actor", dict(batch.extra_info)))
            return {"metrics": {"mfu": 0.5, "pg_loss": 0.125}}

    trainer = object.__new__(JointSFTTrainer)  # (no Ray, no GPU: only what _update_actor reads)
    trainer.config, trainer.total_training_steps, trainer.actor_rollout_wg = config, 10, Workers()
    trainer.use_critic, trainer.global_steps = False, 1
    out = []
    # Mini-batches in samples: a prompt brings n rollouts and its expert replay, so the batch is padded to
    # multiples of mini * (n + 1) -- and verl's own bookkeeping of n is left as it was.
    n, mini = config.actor_rollout_ref.rollout.n, config.actor_rollout_ref.actor.ppo_mini_batch_size
    sizing = {"multiple": trainer._get_required_batch_multiple(1), "want": mini * (n + 1)}
    for step in (1, 10):
        trainer.global_steps = step
        trainer._step_shares = (0.25, 0.5)  # (what _compute_advantage measured on TransferQueue's batch)
        metrics: dict = {}
        trainer._update_actor(types.SimpleNamespace(extra_info={}), metrics)
        (kind, loss), (kind2, info) = trainer.actor_rollout_wg.calls[-2:]
        out.append(
            {
                "order": [kind, kind2],
                "loss": [
                    type(loss) is JointLoss,
                    loss.gamma,
                    loss.expert_share,
                    loss.rl_share,
                    loss.config.clip_ratio_high,
                ],
                "metrics": [metrics["actor/sft_gamma"], metrics["actor/expert_token_share"], metrics["actor/pg_loss"]],
                "mini_batch_samples": info.get("mini_batch_size"),
                "n_after": config.actor_rollout_ref.rollout.n,
            }
        )
    return [sizing, *out]


# -- the expert replay against a live rollout of the same turns --------------------------------------------
class _ScriptedServer:
    """Stands in for verl's LLM server client: "generates" the expert's assistant turns, one per call, as the
    token ids a policy would emit (the turn, then the template's end-of-turn token)."""

    def __init__(self, tokenizer, turns):
        from datamind.train.verl_joint import _turn_end_ids

        self.outputs = [tokenizer.encode(t, add_special_tokens=False) + _turn_end_ids(tokenizer) for t in turns]
        self.calls = 0

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        out = self.outputs[self.calls]
        self.calls += 1
        # (with the sampler's log-probs, as vLLM returns them when verl asks: the replay must carry the field too)
        return TokenOutput(token_ids=out, log_probs=[-0.5] * len(out), stop_reason="completed")


async def _replay(config, data_file: str, tokenizer_dir: str) -> dict:
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.tools.tool_registry import initialize_tools_from_config
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from datamind.train.verl_joint import EXPERT_FLAG, ExpertReplayAgentLoop

    tok = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    tools = initialize_tools_from_config(config.actor_rollout_ref.rollout.multi_turn.tool_config_path)
    server = _ScriptedServer(tok, [m["content"] for m in EXPERT if m["role"] == "assistant"])
    loop = ExpertReplayAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tok,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap(tools),
    )
    kwargs = {
        "raw_prompt": QUESTION,
        "extra_info": {"question": QUESTION[0]["content"], "expert": EXPERT},
        "tools_kwargs": {"run_code": {"create_kwargs": {"data_uri": data_file, "data_format": "csv"}}},
    }
    first = await loop.run({"temperature": 1.0}, session_id=0, **kwargs)  # session 0: [expert, rollout]
    server.calls = 0
    other = await loop.run({"temperature": 1.0}, session_id=1, **kwargs)  # the others: the rollout only
    for tool in tools:
        tool.close()
    expert, live = first
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    stored = list_of_dict_to_tensordict([o.as_dict() for o in first])  # as verl puts a session's outputs
    agent_text = tok.decode([t for t, m in zip(expert.response_ids, expert.response_mask, strict=True) if m])
    env_text = tok.decode([t for t, m in zip(expert.response_ids, expert.response_mask, strict=True) if not m])
    return {
        # verl stores a session's outputs as one batch keyed by the first output's fields: they must agree.
        "same_fields": sorted(expert.as_dict()) == sorted(live.as_dict()),
        "has_logprobs": "rollout_log_probs" in live.as_dict(),
        "stored": [stored.batch_size[0], "rollout_log_probs" in stored.keys(), "extra_fields" in stored.keys()],
        "outputs": [len(first), 1 if not isinstance(other, list) else len(other)],
        "flags": [bool(expert.extra_fields.get(EXPERT_FLAG)), bool(live.extra_fields.get(EXPERT_FLAG))],
        # Had the policy written the expert's turns, verl would have recorded exactly these tokens and masks.
        "same_prompt": expert.prompt_ids == live.prompt_ids,
        "same_response": expert.response_ids == live.response_ids,
        "same_mask": expert.response_mask == live.response_mask,
        "agent_text": agent_text,
        "env_text": env_text,
        "n_agent": sum(expert.response_mask),
        "n_response": len(expert.response_ids),
    }


# -- the loss, on a batch in the layout verl's actor hands its loss function ------------------------------
# Per sample: policy log-probs and old log-probs of its response tokens, advantage, loss mask (0: interpreter
# token), whether it is an expert replay, its weight in the DAPO term (rl_weights: N / (K * T_g), here two
# prompts of 3 and 2 DAPO tokens: 5 / (2 * 3) and 5 / (2 * 2); 0 outside the term).
ROWS = [
    ([-1.0, -0.5, -2.0], [-1.2, -0.9, -1.0], 0.8, [1, 1, 1], False, 5 / 6),  # ratios above 1 + 0.28: clipped
    ([-0.2, -1.5], [-0.1, -1.0], -0.6, [1, 1], False, 5 / 4),  # ratios below 1 - 0.2
    ([-0.4, -0.6], [-0.9, -0.1], 1.5, [1, 1], False, 0),  # its prompt was all right or all wrong: no DAPO
    ([-0.7, -0.9, -0.3, -1.1], [-0.7, -0.9, -0.3, -1.1], 0.0, [1, 0, 1, 1], True, 0),  # expert replays
    ([-2.5], [-2.5], 0.0, [1], True, 0),
]


def _batch(rows, prompt_len=3):
    """Responses of different lengths, right-padded, with the per-sample fields the trainer leaves in
    TransferQueue; the policy's log-probs come as the model's flat output (prompt + response per sample,
    position t predicting token t + 1)."""
    from tensordict import TensorDict
    from tensordict.tensorclass import NonTensorData, NonTensorStack
    from verl.utils import tensordict_utils as tu

    from datamind.train.verl_joint import RL_WEIGHT

    b, r = len(rows), max(len(row[0]) for row in rows)

    def pad(seqs, value=0.0):
        return torch.tensor([list(x) + [value] * (r - len(x)) for x in seqs], dtype=torch.float32)

    td = TensorDict(
        {
            "prompts": torch.ones(b, prompt_len, dtype=torch.long),
            "responses": torch.ones(b, r, dtype=torch.long),
            "attention_mask": torch.tensor([[1] * (prompt_len + len(x[0])) + [0] * (r - len(x[0])) for x in rows]),
            "response_mask": pad([x[3] for x in rows], 0).long(),
            "old_log_probs": pad([x[1] for x in rows]),
            "advantages": pad([[x[2]] * len(x[0]) for x in rows]),
            RL_WEIGHT: torch.tensor([float(x[5]) for x in rows]),
        },
        batch_size=b,
    )
    td["extra_fields"] = NonTensorStack.from_list([NonTensorData({"datamind_expert": x[4]}) for x in rows])
    flat = []
    for x in rows:
        flat += [0.0] * (prompt_len - 1) + list(x[0]) + [0.0]
    values = torch.tensor(flat, requires_grad=True)
    n_tokens = int(sum(sum(x[3]) for x in rows))
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=n_tokens, global_batch_size=b)
    return td, values


def _expected(rows, gamma, clip=(0.2, 0.28)):
    """Eq. 7 by hand: gamma * (expert tokens' mean NLL) + (1 - gamma) * (mean over DAPO prompts -- here one
    rollout each -- of their tokens' mean clipped loss), with the (expert, DAPO) shares of all loss tokens."""
    nll = n_e = n_p = n_all = 0.0
    prompt_means = []
    for lp, old, a, mask, expert, rl in rows:
        n_all += sum(mask)
        if expert:
            nll -= sum(x for x, keep in zip(lp, mask, strict=True) if keep)
            n_e += sum(mask)
        elif rl:
            ratios = [math.exp(x - o) for x, o, keep in zip(lp, old, mask, strict=True) if keep]
            losses = [max(-a * r, -a * min(max(r, 1 - clip[0]), 1 + clip[1])) for r in ratios]
            prompt_means.append(sum(losses) / len(losses))
            n_p += len(losses)
    dapo = sum(prompt_means) / len(prompt_means)
    return gamma * nll / n_e + (1 - gamma) * dapo, n_e / n_all, n_p / n_all


def _loss(config) -> dict:
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.utils.losses import ppo_loss

    from datamind.train.verl_joint import JointLoss, _extras, _token_counts, rl_weights, token_shares

    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    out: dict = {}
    gamma = 0.3
    want, expert_share, rl_share = _expected(ROWS, gamma)
    td, values = _batch(ROWS)
    loss, _ = JointLoss(actor, gamma, expert_share, rl_share)({"log_probs": values}, td)
    loss.backward()
    grads = values.grad.tolist()
    out["joint"] = {"got": loss.item(), "want": want, "shares": [expert_share, rl_share]}

    def response_grads(i):  # d loss / d log-prob of sample i's response tokens
        start = sum(3 + len(x[0]) for x in ROWS[:i]) + 3 - 1
        return grads[start : start + len(ROWS[i][0])]

    # An expert token's gradient is -gamma / (expert tokens); its interpreter token and the filtered rollout get none.
    out["expert_grads"], out["filtered_grads"] = response_grads(3), response_grads(2)

    # Micro-batches: each normalised by the whole batch's token count, their losses add up to the batch's.
    parts = []
    for picked in ([0, 3], [1, 2, 4]):
        sub = tu.index_select_tensor_dict(td, torch.tensor(picked))
        _, sub_values = _batch([ROWS[i] for i in picked])
        parts.append(JointLoss(actor, gamma, expert_share, rl_share)({"log_probs": sub_values}, sub)[0].item())
    out["micro_sum"] = sum(parts)

    # Only DAPO rows of equal weight and gamma 0: exactly verl's own PPO loss (DAPO's clip) on the same batch.
    td2, values2 = _batch([(*r[:5], 1.0) for r in ROWS[:2]])
    ours = JointLoss(actor, 0.0, 0.0, 1.0)({"log_probs": values2}, td2)[0].item()
    td3, values3 = _batch([(*r[:5], 1.0) for r in ROWS[:2]])
    out["pure_rl"] = {"ours": ours, "verl": ppo_loss(actor, {"log_probs": values3}, td3)[0].item()}

    # A step where no prompt is eligible: the SFT term alone, still weighted gamma.
    td5, values5 = _batch(ROWS[2:])
    sft_only = JointLoss(actor, gamma, 4 / 6, 0.0)({"log_probs": values5}, td5)[0].item()
    nll = -sum(lp for x in ROWS[3:] for lp, m in zip(x[0], x[3], strict=True) if m) / 4
    out["sft_only"] = {"got": sft_only, "want": gamma * nll}

    # The step's shares, from the batch as TransferQueue returns it (nested rows) and as padded rows.
    nested = td.clone()
    nested["response_mask"] = torch.nested.as_nested_tensor([torch.tensor(x[3]) for x in ROWS], layout=torch.jagged)
    weights = [x[5] for x in ROWS]
    out["shares"] = [token_shares(_token_counts(b), _extras(b), weights) for b in (nested, td)]

    # The flags must reach the loss; without them it refuses rather than guess.
    out["missing"] = []
    for field in ("extra_fields", "datamind_rl_weight"):
        td4, values4 = _batch(ROWS)
        del td4[field]
        try:
            JointLoss(actor, gamma, expert_share, rl_share)({"log_probs": values4}, td4)
            out["missing"].append("no error")
        except KeyError as exc:
            out["missing"].append(str(exc))

    # Eq. 5 as the paper applies it, on verl's keys ({uid}_{session}_{index}) and reward extra info.
    def sample(acc, void=0.0, expert=False):
        extra = {"reward_extra_info": {"acc": acc, "void": void}}
        return {**extra, "datamind_expert": True} if expert else extra

    keys = ["a_0_0", "a_0_1", "a_1_0", "a_2_0", "b_0_0", "b_1_0", "c_0_0", "c_1_0", "c_2_0", "pad9_0_0", "pad9_1_0"]
    keys += ["d_0_0", "d_1_0"]
    n_tokens = [9, 3, 2, 4, 5, 5, 6, 6, 6, 0, 0, 4, 4]
    extras = [
        sample(1.0, expert=True),  # prompt a: its expert replay (session 0's first output) ...
        sample(1.0),  # ... then a's rollouts: one right, two wrong -> eligible
        sample(0.0),
        sample(0.0, void=1.0),  # (a void turn: out of the DAPO term all the same)
        sample(1.0),  # prompt b: all right -> filtered
        sample(1.0),
        sample(0.0),  # prompt c: all wrong -> filtered
        sample(0.0),
        sample(0.0),
        sample(1.0),  # verl's padding samples: copies of one sample
        sample(1.0),
        sample(0.0),  # prompt d: one right, one wrong -> eligible
        sample(1.0),
    ]
    out["rl_weights"] = rl_weights(keys, extras, n_tokens)
    return out


if __name__ == "__main__":  # pragma: no cover - run through verl_checks.py
    print(json.dumps({}))
