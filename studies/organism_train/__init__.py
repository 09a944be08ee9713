"""Does RREDCoT train better than GRPO? Advantage arms on the model organism."""
