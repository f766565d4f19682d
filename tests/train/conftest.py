"""Registers the training fixtures defined in train_helpers.py."""

from train_helpers import data_root, exported, tiny_model_dir, tokenizer  # noqa: F401
