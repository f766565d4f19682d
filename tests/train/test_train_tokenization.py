import pytest
from train_helpers import QUESTIONS, conversation

from datamind.train.tokenization import DEFAULT_CHAT_TEMPLATE, TemplateError, collate, encode, ensure_chat_template


def _decode_where(tokenizer, enc, mask):
    return "".join(tokenizer.decode([t]) for t, m in zip(enc.input_ids, mask, strict=True) if m)


def test_agent_tokens_are_exactly_the_assistant_turns(tokenizer):
    msgs = conversation(*QUESTIONS[1])
    enc = encode(tokenizer, msgs, n_prompt=2)
    # Expected from the template by hand: each assistant turn's content plus its end-of-turn marker.
    want_agent = "".join(m["content"] + "<|im_end|>\n" for m in msgs if m["role"] == "assistant")
    want_env = "".join(f"<|im_start|>tool\n{m['content']}<|im_end|>\n" for m in msgs if m["role"] == "tool")
    assert _decode_where(tokenizer, enc, enc.agent_mask) == want_agent
    assert _decode_where(tokenizer, enc, enc.env_mask) == want_env
    assert not any(a and e for a, e in zip(enc.agent_mask, enc.env_mask, strict=True))
    prompt_text = tokenizer.decode(enc.input_ids[: enc.prompt_len])
    assert prompt_text.endswith("<|im_start|>assistant\n") and msgs[1]["content"] in prompt_text


def test_prompt_assistant_turns_are_not_trained(tokenizer):
    msgs = conversation(*QUESTIONS[0])
    enc = encode(tokenizer, msgs, n_prompt=4)  # everything up to the tool turn counts as prompt
    assert _decode_where(tokenizer, enc, enc.agent_mask) == msgs[4]["content"] + "<|im_end|>\n"


def test_truncation(tokenizer):
    enc = encode(tokenizer, conversation(*QUESTIONS[0]), 2, max_len=10)
    assert enc.truncated and len(enc.input_ids) == len(enc.agent_mask) == 10


def test_non_prefix_template_is_rejected(tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = "{{ messages | length }}" + DEFAULT_CHAT_TEMPLATE
    with pytest.raises(TemplateError):
        encode(tok, conversation(*QUESTIONS[0]), 2)


def test_default_template_installed_only_when_missing(tokenizer):
    class Bare:
        chat_template = None

    bare = Bare()
    ensure_chat_template(bare)
    assert bare.chat_template == DEFAULT_CHAT_TEMPLATE
    ensure_chat_template(tokenizer)
    assert tokenizer.chat_template != "" and tokenizer.chat_template is not None


def test_collate_pads_right_and_shifts_masks(tokenizer):
    a = encode(tokenizer, conversation(*QUESTIONS[0]), 2)
    b = encode(tokenizer, conversation(*QUESTIONS[2]), 2)
    batch = collate([a, b], pad_id=tokenizer.pad_token_id)
    width = max(len(a.input_ids), len(b.input_ids))
    assert batch.input_ids.shape == (2, width) and batch.agent_mask.shape == (2, width - 1)
    short = 0 if len(a.input_ids) < len(b.input_ids) else 1
    n = min(len(a.input_ids), len(b.input_ids))
    assert batch.attention_mask[short, n:].sum() == 0
    assert (batch.input_ids[short, n:] == tokenizer.pad_token_id).all()
    # position t of the shifted mask scores token t + 1
    assert batch.agent_mask[0].tolist() == [float(x) for x in a.agent_mask[1:]] + [0.0] * (width - len(a.input_ids))


def test_stop_criterion_stops_each_row_at_a_closing_tag(tokenizer):
    import torch

    from datamind.train.policy import _StopOnStrings

    prompt = tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    rows = ["<think>a</think><code>print(1)</code>", "<think>a</think><code>print(1)", "<answer>4</answer>"]
    ids = [prompt + tokenizer(r, add_special_tokens=False)["input_ids"] for r in rows]
    width = max(map(len, ids))
    batch = torch.tensor([[tokenizer.pad_token_id] * (width - len(i)) + i for i in ids])  # left padded
    stop = _StopOnStrings(tokenizer, prompt_width=len(prompt), stops=("</code>", "</answer>"))
    assert stop(batch, None).tolist() == [True, False, True]
