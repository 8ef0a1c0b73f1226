"""Mixing's own settings (``[mixing]``), as the runner takes them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MixingOptions:
    """Mixing's own settings (``[mixing]``).

    Parameters
    ----------
    round_events
        R: valid events of a partition per round (> 0).
    round_seconds
        T: a round is also cut T seconds after it started (0: never).
    contributions_topic
        The topic of contributions (one partition).
    """

    round_events: int
    round_seconds: float
    contributions_topic: str

    def __post_init__(self) -> None:
        if self.round_events < 1:
            raise ValueError("round_events must be at least 1 in mixing mode")
        if self.round_seconds < 0:
            raise ValueError("round_seconds must be at least 0")
