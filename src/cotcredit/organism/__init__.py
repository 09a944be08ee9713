"""A model organism: a synthetic multi-step arithmetic task whose every step a program checks,
and a few-million-parameter Llama trained on it from scratch on CPU.

- `task`: problems (a start number and a chain of additions and subtractions), their reference
  solutions (one line per step, then "The answer is N."), seeded train/dev/test splits.
- `checker`: the first wrong step of any response, its character offset (`error_char`) and the
  graded final answer.
- `model`: the tokenizer (built with `tokenizers`, with a chat template) and the Llama config.
- `train`: deterministic training in two regimes (full chains only; early answers too).
"""

from cotcredit.organism.checker import StepCheck, check_response
from cotcredit.organism.task import Problem, generate_problems, reference_solution

__all__ = ["Problem", "StepCheck", "check_response", "generate_problems", "reference_solution"]
