"""A model organism: a few-million-parameter Llama trained from scratch on CPU on a synthetic
task whose every step a program checks; the benchmark's organism regimes (`unique`,
`multipath`, `forecast`, `long`) each train one with the same recipe.

- `task`: the arithmetic chain (a start number and a chain of additions and subtractions),
  its reference solution (one line per step, then "The answer is N."), seeded splits.
- `checker`: the first wrong step of a chain response, its character offset (`error_char`)
  and the graded final answer; `walk`, the line walk every organism regime's checker shares.
- `model`: the tokenizer (built with `tokenizers`, with a chat template) and the Llama config.
- `train`: the deterministic training recipe (full chains; optionally early answers too),
  for any regime's task.
"""

from cotcredit.bench.organism.checker import StepCheck, check_response
from cotcredit.bench.organism.task import Chain, Problem, generate_problems, reference_solution

__all__ = ["Chain", "Problem", "StepCheck", "check_response", "generate_problems",
           "reference_solution"]
