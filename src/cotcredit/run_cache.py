"""What one run builds once and reuses, in one object passed to where it is needed.

`run_analysis` makes a `RunCache` per run and hands it to every method on the trace's context
(`TraceContext.cache`); a trainer's online scorer keeps one for its life; a caller that runs
several analyses in one process may pass one to each. What it holds, by kind:

* ``"forcing"``: the answer forcing of a model and `ForcingOptions` (`lm.forcing.answer_forcing`:
  the exit string, the answer's terminator tokens);
* ``"generator"``: the sampling generator of a model and backend (`lm.sampling.get_generator`),
  whose token counts the run reads for each method's cost.

Nothing is kept on the model, the tokenizer or the scorer by other modules: what depends on the
model alone is the scorer's own (its float32 head, its chat template's markers), what depends on
one trace is on its `TraceContext` (its references, the attribution value functions), and a
function asked without a cache builds what it needs afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class RunCache:
    """Objects a run builds once, by kind and key (see the module docstring)."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, Hashable], Any] = {}

    def get(self, kind: str, key: Hashable, build: Callable[[], T]) -> T:
        """The `kind` object for `key`: `build()` the first time it is asked for, then the same
        object."""
        if (kind, key) not in self._built:
            self._built[kind, key] = build()
        return self._built[kind, key]

    def of_kind(self, kind: str) -> list[Any]:
        """Every `kind` object built so far, in the order they were built."""
        return [v for (k, _), v in self._built.items() if k == kind]
