"""What one run builds once and reuses, passed explicitly instead of kept on the model.

`run_analysis` makes one per run (methods find it as `TraceContext.cache`); an online scorer
keeps one for its life. Kinds: ``"forcing"`` (`lm.forcing.answer_forcing`), ``"generator"``
(`lm.sampling.get_generator`, whose token counts give each method's cost) and ``"value-head"``
(`methods.value_head`: a fitted head by its file). A function asked
without a cache builds what it needs afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class RunCache:
    """Objects a run builds once, by kind and key."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, Hashable], Any] = {}

    def get(self, kind: str, key: Hashable, build: Callable[[], T]) -> T:
        """The `kind` object for `key`, built by `build()` the first time."""
        if (kind, key) not in self._built:
            self._built[kind, key] = build()
        return self._built[kind, key]

    def of_kind(self, kind: str) -> list[Any]:
        """Every `kind` object built so far, in the order they were built."""
        return [v for (k, _), v in self._built.items() if k == kind]
