"""Agent training from the final dataset: exports (LLaMA-Factory, verl), the SFT + DAPO trainer, launchers.

Import the submodules you need; this package file stays import-light (no torch) so DAG files and
CPU-only workers can use ``exports`` and ``launchers`` without loading the training stack.
"""
