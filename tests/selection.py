"""Which parametrized cases are `slow`: deselected by the default `pytest` run, run by CI.

pyproject.toml registers the marker and deselects it (`addopts = -m "not slow"`); `pytest -m slow`
runs only those cases and `pytest -m "slow or not slow"` runs everything. A slow case is no weaker
than the others: the quick subset keeps every code path and feature, the slow cases repeat them
over more shapes, dtypes, layouts and end-to-end runs (each new one costs seconds of compilation
on a CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest


def params(
    values: Iterable,
    quick: Iterable,
    ids: Callable[[object], str] | None = None,
    unpack: bool = False,
) -> list:
    """One pytest.param per value, marked slow unless it is in `quick`. `ids` names a case;
    `unpack` spreads a tuple over several argnames (parametrize("a, b", ...))."""
    values, quick = list(values), list(quick)
    missing = [q for q in quick if q not in values]
    assert not missing, f"quick cases that are not cases: {missing}"
    out = []
    for v in values:
        marks = () if v in quick else pytest.mark.slow
        args = tuple(v) if unpack else (v,)
        out.append(pytest.param(*args, id=ids(v) if ids else None, marks=marks))
    return out
