"""Each formula against values worked out by hand on tiny tensors."""

import math

import pytest
import torch

from datamind.train.losses import (
    combined_loss,
    dapo_loss,
    dynamic_sampling_mask,
    group_advantages,
    masked_mean,
    rl_eligible,
    sft_loss,
    token_entropy,
    token_logprobs,
)


def test_token_logprobs_scores_next_token():
    # Two-token vocabulary; logits (0, ln 3) give p = (1/4, 3/4) at every position.
    logits = torch.tensor([[[0.0, math.log(3)]] * 3])
    ids = torch.tensor([[0, 1, 0]])  # targets are ids[1:] = (1, 0)
    got = token_logprobs(logits, ids)
    assert got.shape == (1, 2)
    assert torch.allclose(got, torch.tensor([[math.log(0.75), math.log(0.25)]]))


def test_token_entropy_uniform_is_log_v():
    ent = token_entropy(torch.zeros(1, 3, 4))
    assert torch.allclose(ent, torch.full((1, 2), math.log(4)))


def test_sft_loss_ignores_masked_environment_tokens():
    logp = torch.tensor([[-1.0, -2.0, -3.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])  # the middle token is interpreter output
    assert sft_loss(logp, mask).item() == pytest.approx((1 + 3) / 2)
    # Micro-batching: the batch's token count as normaliser makes the parts add up to the batch mean.
    assert sft_loss(logp, mask, normalizer=4).item() == pytest.approx(1.0)


def test_masked_mean_empty_mask_is_zero_with_gradient():
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    out = masked_mean(x, torch.zeros(1, 2))
    out.backward()
    assert out.item() == 0.0 and torch.equal(x.grad, torch.zeros(1, 2))


def test_group_advantages_one_right_of_four():
    # mean 0.25; unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    assert torch.allclose(adv, torch.tensor([[1.5, -0.5, -0.5, -0.5]]), atol=1e-5)


def test_group_advantages_pair_and_equal_group():
    adv = group_advantages(torch.tensor([[1.0, 0.0], [0.5, 0.5]]))
    s = 1 / math.sqrt(2)  # (1 - 0.5) / std, std = sqrt(0.5)
    assert torch.allclose(adv[0], torch.tensor([s, -s]), atol=1e-5)
    assert torch.equal(adv[1], torch.zeros(2))  # all equal: exactly zero, not NaN


def test_group_advantages_rejects_single_sample_groups():
    with pytest.raises(ValueError):
        group_advantages(torch.tensor([[1.0], [0.0]]))


def test_dynamic_sampling_mask_counts_correct_rollouts_eq5():
    correct = torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 1, 1]])
    assert dynamic_sampling_mask(correct).tolist() == [False, False, True, True]
    # Rewards can differ inside an all-correct group (length factor) or an all-wrong one (format
    # penalty): eq. 5 still drops both, because no rollout is better *at answering* than another.
    rewards_all_correct = [1.0, 0.8, 0.5, 1.0]
    rewards_all_wrong = [0.0, -0.1, 0.0, -0.1]
    assert len(set(rewards_all_correct)) > 1 and len(set(rewards_all_wrong)) > 1
    assert dynamic_sampling_mask(torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]])).tolist() == [False, False]


def _ratios(values):
    """logp / old_logp pairs whose ratio exp(logp - old) is exactly ``values``."""
    old = torch.full((len(values), len(values[0])), -1.0)
    return old + torch.log(torch.tensor(values)), old


def test_dapo_loss_decoupled_clipping_by_hand():
    logp, old = _ratios([[1.5, 0.5], [1.5, 0.5]])
    adv = torch.tensor([1.0, -1.0])
    # A=+1: min(1.5, 1.28)=1.28, min(0.5, 0.8)=0.5; A=-1: min(-1.5, -1.28)=-1.5, min(-0.5, -0.8)=-0.8
    loss, stats = dapo_loss(logp, old, adv, torch.ones(2, 2), 0.2, 0.28)
    assert loss.item() == pytest.approx(-(1.28 + 0.5 - 1.5 - 0.8) / 4)
    assert stats["clip_frac"] == pytest.approx(0.5)  # (A=+1, r=1.5) and (A=-1, r=0.5)
    masked, _ = dapo_loss(logp, old, adv, torch.tensor([[1.0, 1.0], [1.0, 0.0]]), 0.2, 0.28)
    assert masked.item() == pytest.approx(-(1.28 + 0.5 - 1.5) / 3)


def test_dapo_loss_upper_clip_is_decoupled_from_lower():
    logp, old = _ratios([[1.25]])
    adv = torch.tensor([1.0])
    loss, _ = dapo_loss(logp, old, adv, torch.ones(1, 1), 0.2, 0.28)
    assert loss.item() == pytest.approx(-1.25)  # inside 1 + 0.28: not clipped
    symmetric, _ = dapo_loss(logp, old, adv, torch.ones(1, 1), 0.2, 0.2)
    assert symmetric.item() == pytest.approx(-1.2)


def test_dapo_loss_gradient_vanishes_on_clipped_tokens():
    logp, old = _ratios([[1.5, 0.5], [1.5, 0.5]])
    logp.requires_grad_(True)
    loss, _ = dapo_loss(logp, old, torch.tensor([1.0, -1.0]), torch.ones(2, 2))
    loss.backward()
    # d/dlogp of -(1/4) * r * A is -(r * A) / 4 where the unclipped term is the minimum, else 0.
    expected = torch.tensor([[0.0, -0.5 / 4], [1.5 / 4, 0.0]])
    assert torch.allclose(logp.grad, expected, atol=1e-6)


def test_dapo_loss_weighted_mask_gives_per_group_token_mean():
    # Group A: one rollout with 2 tokens, objective r*A = 1 each; group B: one rollout, 1 token, r*A = -1.
    logp, old = _ratios([[1.0, 1.0], [1.0, 1.0]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    weights = torch.tensor([[1 / (2 * 2)], [1 / (2 * 1)]])  # 1 / (K groups * tokens in group)
    loss, _ = dapo_loss(logp, old, adv, mask * weights, normalizer=1.0)
    assert loss.item() == pytest.approx(-((1 + 1) / 2 + (-1) / 1) / 2)


def test_combined_loss():
    sft, dapo = torch.tensor(2.0), torch.tensor(4.0)
    assert combined_loss(sft, dapo, 0.25).item() == pytest.approx(0.25 * 2 + 0.75 * 4)
    assert combined_loss(sft, None, 0.25).item() == pytest.approx(0.5)  # filtered group: SFT term only


def test_rl_eligible_masks_filtered_groups_void_and_empty_rollouts():
    rewards = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])  # correctness
    void = torch.tensor([[False, False, False, True], [False] * 4, [True, False, False, False]])
    has_tokens = torch.tensor([[True] * 4, [True] * 4, [True, True, False, True]])
    assert rl_eligible(rewards, void, has_tokens).tolist() == [
        [True, True, True, False],  # the void rollout gives no loss
        [False, False, False, False],  # all correct: SFT term only
        [False, True, False, True],  # void, and nothing left after truncation
    ]
