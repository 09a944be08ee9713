"""GRPO training with per-token advantages reweighted by RREDCoT segment rewards.

Modules: ``advantages`` (the reweighting formula, no TRL), ``config`` (the YAML config of
``cotcredit train``), ``trl_config`` (the TRL ``GRPOConfig`` and peft ``LoraConfig`` a config
makes), ``trainer`` (the TRL GRPOTrainer subclass), ``scoring`` (segment rewards of a generated
completion from the current policy), ``metrics`` (metrics.jsonl and reward curves), ``run``
(``train(config)``: what ``cotcredit train`` does). Import them directly; this package imports
nothing heavy on its own.
"""
