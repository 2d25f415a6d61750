"""The feature families this server is built from, listed once.

The server (`app.main`) and the `cairn` command (`app.cli`) take the enabled subset from here;
nothing under `app/core` names a feature.
"""

from __future__ import annotations

from collections.abc import Sequence

from app import analysis, datasets, graph, memory
from app.core.feature import Feature, select

FEATURES: tuple[Feature, ...] = (memory.FEATURE, graph.FEATURE, analysis.FEATURE, datasets.FEATURE)


def enabled(names: Sequence[str]) -> list[Feature]:
    """The features named by `CAIRN_FEATURES` (`all`: every one), in the order listed above."""
    return select(FEATURES, names)
