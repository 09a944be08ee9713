"""GRPO against GRPO with RREDCoT advantages on the lookup task (the realistic-model check)."""
