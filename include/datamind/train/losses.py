"""The paper's section 4 objectives as pure tensor functions (no model, no data loading).

Conventions: ``logp``/``old_logp`` are per-token log-probabilities of the *target* tokens,
shape ``[N, T]``; ``mask`` is 1.0 on agent tokens that count toward a loss and 0.0 on prompt,
interpreter (environment) and padding tokens, same shape. Every reduction divides by the number
of counted tokens ("token-level averaging"), so long and short trajectories weigh per token.
"""

from __future__ import annotations

import torch


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log pi(x_t | x_<t) for t = 1..T-1: ``[B, T, V]`` logits -> ``[B, T-1]``.

    Computed in float32: bf16 log-softmax over a 150k vocabulary loses the small ratios DAPO clips on.
    """
    logits = logits[:, :-1, :].float()
    targets = input_ids[:, 1:].unsqueeze(-1)
    return torch.log_softmax(logits, dim=-1).gather(-1, targets).squeeze(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution at each position predicting a target: ``[B, T-1]``."""
    logp = torch.log_softmax(logits[:, :-1, :].float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, normalizer: float | None = None) -> torch.Tensor:
    """``sum(values * mask) / normalizer`` (default ``mask.sum()``); an empty mask gives a 0 that still
    backpropagates (as zeros).

    ``mask`` may hold weights, and ``normalizer`` may be the token count of a whole batch when the batch
    is processed in micro-batches: the micro-batch losses then add up to the batch's token-level mean.
    """
    mask = mask.to(values.dtype)
    total = (values * mask).sum()
    count = float(mask.sum().item()) if normalizer is None else float(normalizer)
    return total / count if count > 0 else total


def sft_loss(logp: torch.Tensor, mask: torch.Tensor, normalizer: float | None = None) -> torch.Tensor:
    """Eq. 4: negative log-likelihood of agent tokens only (interpreter output is masked out), averaged
    per token as LLaMA-Factory does."""
    return -masked_mean(logp, mask, normalizer)


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Eq. 6: ``(R_i - mean(R)) / std(R)`` within each group; ``rewards`` is ``[n_groups, G]``.

    The standard deviation is the unbiased (n-1) estimate, as in verl's GRPO/DAPO advantage that the
    paper trained with; ``eps`` keeps an all-equal group at exactly zero advantage instead of NaN.
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [n_groups, G>=2], got {tuple(rewards.shape)}")
    rewards = rewards.float()
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, unbiased=True)
    return (rewards - mean) / (std + eps)


def dynamic_sampling_mask(correct: torch.Tensor) -> torch.Tensor:
    """Eq. 5's constraint on ``[n_groups, G]`` answer correctness (0/1): True where ``0 < #correct < G``.

    It counts *correct* rollouts, not distinct rewards: with the length factor and the format penalty in
    the reward, an all-correct or all-wrong group can still hold unequal rewards, and the paper drops it
    from the RL term all the same.  Groups that fail it train on the SFT term only.
    """
    n_correct = (correct > 0).sum(dim=1)
    return (n_correct > 0) & (n_correct < correct.shape[1])


def rl_eligible(correct: torch.Tensor, void: torch.Tensor, has_tokens: torch.Tensor) -> torch.Tensor:
    """``[n_groups, G]`` bool: which rollouts enter the DAPO term.

    A rollout counts when its group passes the dynamic-sampling filter, it has no void turn (the
    paper masks such trajectories out entirely) and it has at least one agent token left after
    truncation. Advantages are still normalised over the whole group, void rollouts included: their
    reward is a real outcome of the policy.
    """
    return dynamic_sampling_mask(correct).unsqueeze(1) & ~void.bool() & has_tokens.bool()


def dapo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. 5: clipped importance-weighted policy loss with decoupled clip range, token-level mean.

    ``advantages`` is per sequence (``[N]``, broadcast over its tokens) or per token (``[N, T]``).
    ``mask`` may carry per-token weights (see ``masked_mean``).
    Returns the loss to minimise and diagnostics (clipped-token fraction, mean ratio).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    ratio = torch.exp(logp - old_logp.detach())
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    objective = torch.minimum(unclipped, clipped)
    loss = -masked_mean(objective, mask, normalizer)
    with torch.no_grad():
        m = mask.bool()
        n = int(m.sum().item())
        clip_frac = float(((clipped < unclipped) & m).sum().item() / n) if n else 0.0
        mean_ratio = float(ratio[m].mean().item()) if n else 1.0
    return loss, {"clip_frac": clip_frac, "ratio_mean": mean_ratio}


def combined_loss(sft: torch.Tensor, dapo: torch.Tensor | None, gamma: float) -> torch.Tensor:
    """Eq. 7: ``gamma * SFT + (1 - gamma) * DAPO``; a filtered group (``dapo is None``) gives SFT only.

    The SFT-only case keeps the weight ``gamma`` so the scale of the expert term does not jump when a
    group drops out of the RL term.
    """
    if dapo is None:
        return gamma * sft
    return gamma * sft + (1.0 - gamma) * dapo
