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

    class Trainer(JointSFTTrainer):
        def _expert_token_share(self, batch):  # (read from TransferQueue in a run)
            return 0.25

    trainer = object.__new__(Trainer)  # (no Ray, no GPU: only what _update_actor reads)
    trainer.config, trainer.total_training_steps, trainer.actor_rollout_wg = config, 10, Workers()
    trainer.use_critic, trainer.global_steps = False, 1
    out = []
    # Mini-batches in samples: a prompt brings n rollouts and its expert replay, so the batch is padded to
    # multiples of mini * (n + 1) -- and verl's own bookkeeping of n is left as it was.
    n, mini = config.actor_rollout_ref.rollout.n, config.actor_rollout_ref.actor.ppo_mini_batch_size
    sizing = {"multiple": trainer._get_required_batch_multiple(1), "want": mini * (n + 1)}
    for step in (1, 10):
        trainer.global_steps = step
        metrics: dict = {}
        trainer._update_actor(types.SimpleNamespace(extra_info={}), metrics)
        (kind, loss), (kind2, info) = trainer.actor_rollout_wg.calls[-2:]
        out.append(
            {
                "order": [kind, kind2],
                "loss": [type(loss) is JointLoss, loss.gamma, loss.expert_share, loss.config.clip_ratio_high],
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
        return TokenOutput(token_ids=out, stop_reason="completed")


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
    agent_text = tok.decode([t for t, m in zip(expert.response_ids, expert.response_mask) if m])
    env_text = tok.decode([t for t, m in zip(expert.response_ids, expert.response_mask) if not m])
    return {
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
def _batch(lp, old, adv, mask, expert, prompt_len=3):
    """Responses of different lengths, right-padded; ``lp`` (the policy's log-probs of each response token)
    is laid out the way the model's flat output is: one value per token of prompt + response, shifted by one."""
    from tensordict import TensorDict
    from tensordict.tensorclass import NonTensorData, NonTensorStack
    from verl.utils import tensordict_utils as tu

    b, r = len(lp), max(len(x) for x in lp)

    def pad(rows, value=0.0):
        return torch.tensor([list(x) + [value] * (r - len(x)) for x in rows], dtype=torch.float32)

    attention = torch.tensor([[1] * prompt_len + [1] * len(x) + [0] * (r - len(x)) for x in lp])
    td = TensorDict(
        {
            "prompts": torch.ones(b, prompt_len, dtype=torch.long),
            "responses": torch.ones(b, r, dtype=torch.long),
            "attention_mask": attention,
            "response_mask": pad(mask, 0).long(),
            "old_log_probs": pad(old),
            "advantages": pad([[a] * len(x) for a, x in zip(adv, lp)]),
        },
        batch_size=b,
    )
    td["extra_fields"] = NonTensorStack.from_list([NonTensorData({"datamind_expert": e}) for e in expert])
    flat = []
    for x in lp:  # position t of the flat output predicts token t + 1: the response's log-probs sit at P-1 ..
        flat += [0.0] * (prompt_len - 1) + list(x) + [0.0]
    values = torch.tensor(flat, requires_grad=True)
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=int(sum(sum(m) for m in mask)), global_batch_size=b)
    return td, values


def _expected(lp, old, adv, mask, expert, gamma, clip=(0.2, 0.28)):
    """Eq. 7 by hand: gamma * (expert tokens' mean NLL) + (1 - gamma) * (rollout tokens' mean clipped loss)."""
    nll = n_e = pg = n_p = 0.0
    for x, o, a, m, e in zip(lp, old, adv, mask, expert):
        for t, keep in enumerate(m):
            if not keep:
                continue
            if e:
                nll, n_e = nll - x[t], n_e + 1
            else:
                ratio = math.exp(x[t] - o[t])
                pg += max(-a * ratio, -a * min(max(ratio, 1 - clip[0]), 1 + clip[1]))
                n_p += 1
    return gamma * nll / n_e + (1 - gamma) * pg / n_p, n_e / (n_e + n_p)


def _loss(config) -> dict:
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.utils.losses import ppo_loss

    from datamind.train.verl_joint import JointLoss

    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    # Two rollouts (one clipped above 1 + 0.28, one below 1 - 0.2) and two expert replays; 0s mark interpreter tokens.
    lp = [[-1.0, -0.5, -2.0], [-0.2, -1.5], [-0.7, -0.9, -0.3, -1.1], [-2.5]]
    old = [[-1.2, -0.9, -1.0], [-0.1, -1.0], [-0.7, -0.9, -0.3, -1.1], [-2.5]]
    adv = [0.8, -0.6, 0.0, 0.0]
    mask = [[1, 1, 1], [1, 1], [1, 0, 1, 1], [1]]
    expert = [False, False, True, True]
    out: dict = {}
    gamma = 0.3
    want, share = _expected(lp, old, adv, mask, expert, gamma)
    td, values = _batch(lp, old, adv, mask, expert)
    loss, metrics = JointLoss(actor, gamma, share)({"log_probs": values}, td)
    loss.backward()
    grads = values.grad.tolist()
    out["joint"] = {"got": loss.item(), "want": want, "share": share}
    # d loss / d log-prob of an expert token is -gamma / (number of expert tokens); interpreter tokens get none.
    start = sum(3 + len(x) for x in lp[:2]) + 3 - 1  # sample 2's first response token in the flat output
    expert_grads = grads[start : start + len(lp[2])]
    out["expert_grads"] = expert_grads
    out["n_expert_tokens"] = sum(sum(m) for m, e in zip(mask, expert) if e)

    # Micro-batches: each normalised by the whole batch's token count, their losses add up to the batch's.
    parts = []
    for rows in ([0, 2], [1, 3]):
        sub = tu.index_select_tensor_dict(td, torch.tensor(rows))
        sub_lp = [lp[i] for i in rows]
        _, sub_values = _batch(
            sub_lp, [old[i] for i in rows], [adv[i] for i in rows], [mask[i] for i in rows], [expert[i] for i in rows]
        )
        parts.append(JointLoss(actor, gamma, share)({"log_probs": sub_values}, sub)[0].item())
    out["micro_sum"] = sum(parts)

    # No expert rows and gamma 0: exactly verl's own PPO loss (DAPO's clip) on the same batch.
    rl_rows = [0, 1]
    td2, values2 = _batch(
        [lp[i] for i in rl_rows],
        [old[i] for i in rl_rows],
        [adv[i] for i in rl_rows],
        [mask[i] for i in rl_rows],
        [False, False],
    )
    ours = JointLoss(actor, 0.0, 0.0)({"log_probs": values2}, td2)[0].item()
    td3, values3 = _batch(
        [lp[i] for i in rl_rows],
        [old[i] for i in rl_rows],
        [adv[i] for i in rl_rows],
        [mask[i] for i in rl_rows],
        [False, False],
    )
    verl_value = ppo_loss(actor, {"log_probs": values3}, td3)[0].item()
    out["pure_rl"] = {"ours": ours, "verl": verl_value}

    # The step's share, from the batch as TransferQueue returns it (nested rows) and as padded rows.
    from datamind.train.verl_joint import expert_token_share

    nested = td.clone()
    nested["response_mask"] = torch.nested.as_nested_tensor([torch.tensor(m) for m in mask], layout=torch.jagged)
    out["share"] = [expert_token_share(nested), expert_token_share(td)]

    # The expert flag must reach the loss; without it the loss refuses rather than guess.
    td4, values4 = _batch(lp, old, adv, mask, expert)
    del td4["extra_fields"]
    try:
        JointLoss(actor, gamma, share)({"log_probs": values4}, td4)
        out["missing_flags"] = "no error"
    except KeyError as exc:
        out["missing_flags"] = str(exc)
    return out


if __name__ == "__main__":  # pragma: no cover - run through verl_checks.py
    print(json.dumps({}))
