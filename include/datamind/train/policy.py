"""A Hugging Face causal LM as the rollout policy (``GenerateFn``): batched sampling with stop strings."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from datamind.agent.protocol import STOP_STRINGS
from datamind.train.tokenization import render


class _StopOnStrings(StoppingCriteria):
    """Per-row stop once the generated tail contains a stop string (rows finish independently)."""

    def __init__(self, tokenizer, prompt_width: int, stops: Sequence[str], tail_tokens: int = 16) -> None:
        self.tokenizer, self.prompt_width, self.stops, self.tail = tokenizer, prompt_width, tuple(stops), tail_tokens

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        tails = self.tokenizer.batch_decode(input_ids[:, max(self.prompt_width, input_ids.shape[1] - self.tail) :])
        return torch.tensor([any(s in t for s in self.stops) for t in tails], device=input_ids.device)


class HFPolicy:
    def __init__(self, model, tokenizer, *, temperature: float = 0.7, top_p: float = 1.0, stops=STOP_STRINGS):
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.top_p, self.stops = temperature, top_p, stops

    @torch.no_grad()
    def __call__(self, conversations: Sequence[list[dict]], max_new_tokens: int) -> list[str]:
        if max_new_tokens <= 0:
            return ["" for _ in conversations]
        tok = self.tokenizer
        texts = [render(tok, c, add_generation_prompt=True) for c in conversations]
        side, tok.padding_side = tok.padding_side, "left"  # decoder-only models continue from the right edge
        try:
            enc = tok(texts, add_special_tokens=False, padding=True, return_tensors="pt")
        finally:
            tok.padding_side = side
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in enc.items()}
        width = enc["input_ids"].shape[1]
        was_training = self.model.training
        self.model.eval()
        try:
            out = self.model.generate(
                **enc,
                do_sample=self.temperature > 0,
                temperature=self.temperature if self.temperature > 0 else None,
                top_p=self.top_p,
                top_k=0,
                max_new_tokens=max_new_tokens,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                stopping_criteria=StoppingCriteriaList([_StopOnStrings(tok, width, self.stops)]),
            )
        finally:
            self.model.train(was_training)
        return tok.batch_decode(out[:, width:], skip_special_tokens=True)
