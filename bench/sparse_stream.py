"""The sparse benchmarks' workload: bags of words labelled by a hidden sparse separator.

Every event draws ``WORDS_PER_EVENT`` words (with replacement) from a vocabulary of
``VOCABULARY`` words ``word0 .. word99999`` with Zipf-like probabilities (word of rank r drawn
with probability ∝ 1/r, as in natural text), and carries them as a bag of words
``{"word": count}`` (so 20 draws give about 18 distinct names). The hidden teacher gives a
standard normal weight to a random ``TEACHER_FRACTION`` of the vocabulary and 0 to the rest; the
label is +1 when the teacher's score (the sum of the drawn words' weights) is positive, else -1,
and a fraction ``LABEL_NOISE`` of the labels is flipped, so learning never stops.

Events are generated chunk by chunk (:meth:`WordStream.chunks`, :meth:`WordStream.record_chunks`),
so a process measuring its own memory holds one poll batch of them at a time, as the consumer does.

>>> rows, signs = WordStream(seed=1).events(3)
>>> [sum(row.values()) for row in rows], sorted(set(signs.tolist()) | {1.0})
([20.0, 20.0, 20.0], [-1.0, 1.0])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import orjson
from numpy.typing import NDArray

VOCABULARY = 100_000
WORDS_PER_EVENT = 20
TEACHER_FRACTION = 0.1
LABEL_NOISE = 0.05
SEED = 20_261_201
WORD_PREFIX = "word"
ID_PREFIX = "sp"

Rows = list[dict[str, float]]


class WordStream:
    """A reproducible stream of bag-of-words events (see the module docstring)."""

    def __init__(self, seed: int = SEED) -> None:
        self._rng = np.random.default_rng(seed)
        ranks = np.arange(1, VOCABULARY + 1, dtype=np.float64)
        self._probabilities = (1.0 / ranks) / (1.0 / ranks).sum()
        self._teacher = np.zeros(VOCABULARY)
        chosen = self._rng.choice(VOCABULARY, int(VOCABULARY * TEACHER_FRACTION), replace=False)
        self._teacher[chosen] = self._rng.standard_normal(chosen.size)
        self._produced = 0

    def events(self, count: int) -> tuple[Rows, NDArray[np.float64]]:
        """The next ``count`` events: (bags of words, labels as ±1 floats)."""
        draws = self._rng.choice(VOCABULARY, size=(count, WORDS_PER_EVENT), p=self._probabilities)
        scores = self._teacher[draws].sum(axis=1)
        signs = np.where(scores > 0.0, 1.0, -1.0)
        flips = self._rng.random(count) < LABEL_NOISE
        signs[flips] = -signs[flips]
        # Names are spelt per event, not kept for the whole vocabulary: the memory probe
        # (bench.sparse_memory) measures the pipeline, not a table of 100,000 strings.
        rows: Rows = [
            {f"{WORD_PREFIX}{word}": float(times) for word, times in Counter(row).items()}
            for row in draws.tolist()
        ]
        return rows, signs

    def chunks(self, count: int, size: int) -> Iterator[tuple[Rows, NDArray[np.float64]]]:
        """``count`` events in chunks of at most ``size``."""
        for start in range(0, count, size):
            yield self.events(min(size, count - start))

    def record_chunks(self, count: int, size: int) -> Iterator[list[bytes]]:
        """The record values of ``count`` events in chunks of at most ``size``.

        Only the values outlive a chunk (the bags of words they are encoded from do not), as a
        consumer holds only the record values of its poll.
        """
        for start in range(0, count, size):
            yield self.records(*self.events(min(size, count - start)))

    def records(self, rows: Rows, signs: NDArray[np.float64]) -> list[bytes]:
        """The events as the JSON record values a producer sends (with an ``id`` each).

        Each value holds exactly its bytes, as kafka-python's fetcher hands values out
        (``bytes`` of a slice of the fetched buffer): ``orjson.dumps`` returns a ``bytes`` that
        keeps its whole write buffer (KiBs for a value of a few hundred bytes).
        """
        values = []
        for row, sign in zip(rows, signs.tolist(), strict=True):
            event = {"id": f"{ID_PREFIX}{self._produced}", "features": row, "label": int(sign)}
            values.append(bytes(memoryview(orjson.dumps(event))))
            self._produced += 1
        return values
