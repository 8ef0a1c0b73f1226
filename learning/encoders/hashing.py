"""Signed feature hashing of names into 2^b buckets, for open vocabularies of unbounded size.

Two hash functions, picked by ``hash``:

``"murmur3"`` (the default)
    scikit-learn's ``FeatureHasher(n_features=2**n_bits, alternate_sign=True,
    input_type="dict")``, bucket for bucket and sign for sign: h = signed 32-bit MurmurHash3
    (seed 0) of the name's UTF-8 bytes, bucket = |h| mod 2^b (sklearn's value for h = -2^31,
    whose absolute value does not fit in 32 bits, is (2^31 - 1 - (2^b - 1)) mod 2^b), sign -1
    when h < 0. Vectors therefore agree with models trained offline in Python. scikit-learn has
    no bias: with ``bias=True`` its bucket i is our column i + 1 (the bias is column 0). Names
    must be strings, as in scikit-learn.
``"blake2b"``
    The original hashing: BLAKE2b (8-byte digest) of the typed name (``"s:"`` + UTF-8 for str,
    ``"i:"`` + decimal for int, so ``"1"`` and ``1`` differ); the low b bits pick the bucket, the
    top bit the sign. Models saved before the choice existed load with it.

Murmur3 is the default because it is the ecosystem's convention and, through ``mmh3``, about ten
times cheaper per name than BLAKE2b; its only loss is int names, which JSON never produces.

Speed: one event's murmur3 row is built in one compiled call (:mod:`._murmur`: the hash, the
buckets, the sort and the sums of shared columns), from the names joined into one UTF-8 string and
the values packed as float64; batches hash their names in bulk (one ``mmh3`` call per name from
C, then numpy). Neither keeps a cache: hashing a fresh name costs less than looking it up in a
large dict (measured on the 100,000-word stream). BLAKE2b (~800 ns per name) keeps a bounded name
cache.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Hashable, Mapping, Sequence
from itertools import chain
from typing import Any, Literal

import mmh3
import numpy as np
from numpy.typing import NDArray

from learning.encoders._common import (
    DEFAULT_MAX_FEATURES_PER_EVENT,
    MAX_ABS_FEATURE,
    PLAIN_NUMBER_TYPES,
    FeatureName,
    ObjectEncoder,
    RowKey,
    SparseRow,
    assemble,
    bad_name,
    check_name,
    checked_value,
    value_error,
)
from learning.encoders._murmur import INT32_MIN, hashed_batch, hashed_row_entry, murmur_bucket
from learning.encoders._packed import packed_format
from learning.errors import FeatureError
from learning.sparse import CSRBatch

logger = logging.getLogger(__name__)

HashName = Literal["murmur3", "blake2b"]
HASHES: tuple[HashName, ...] = ("murmur3", "blake2b")
DEFAULT_HASH: HashName = "murmur3"
LEGACY_HASH: HashName = "blake2b"
"""The hash of saved models that name none (they predate the choice)."""
DEFAULT_HASH_BITS = 18
MAX_HASH_BITS = 24
HASH_DIGEST_BYTES = 8
SIGN_BIT = 63
MURMUR_SEED = 0
HASH_CACHE_SIZE = 131_072
"""BLAKE2b names whose (column, sign) are remembered; the cache is emptied when full. It holds a
100,000-word vocabulary whole (about 15 MB), so a text stream hashes each word once."""
MURMUR_NAMES = "str (murmur3 hashing takes string names, as scikit-learn does)"
NAME_SEPARATOR = "\x00"


class HashingEncoder(ObjectEncoder):
    """Signed feature hashing of names into 2^n_bits buckets (see the module docs).

    Colliding names share a column; their signed values are summed in the event's order, so
    colliding features cancel on average instead of piling up.

    Parameters
    ----------
    n_bits
        log2 of the number of buckets (1 to 24).
    bias
        Prepend x₀ = 1.
    hash
        ``"murmur3"`` (scikit-learn's ``FeatureHasher``) or ``"blake2b"``.
    max_features_per_event
        Most names one event may carry (``too_many_features`` beyond).

    Examples
    --------
    >>> encoder = HashingEncoder(n_bits=4)
    >>> vector = encoder.encode({"colour": 2.0})
    >>> encoder.dimension, float(np.abs(vector).sum())
    (17, 3.0)
    >>> encoder.bucket("colour")
    (2, 1.0)
    >>> [part.tolist() for part in encoder.encode_sparse({"colour": 2.0, "size": 1.0})]
    [[0, 2, 7], [1.0, 2.0, -1.0]]
    """

    kind = "hashing"
    summed = True

    def __init__(
        self,
        n_bits: int = DEFAULT_HASH_BITS,
        *,
        bias: bool = True,
        hash: HashName = DEFAULT_HASH,
        max_features_per_event: int = DEFAULT_MAX_FEATURES_PER_EVENT,
    ) -> None:
        if not 1 <= n_bits <= MAX_HASH_BITS:
            raise ValueError(f"n_bits must be in 1..{MAX_HASH_BITS}, got {n_bits}")
        if hash not in HASHES:
            raise ValueError(f"hash must be one of {HASHES}, got {hash!r}")
        self.n_bits = n_bits
        self.bias = bias
        self.hash: HashName = hash
        self.max_features_per_event = self._limit(max_features_per_event)
        self._cache: dict[Hashable, int] = {}

    @property
    def n_buckets(self) -> int:
        """2 ** n_bits."""
        return 1 << self.n_bits

    @property
    def dimension(self) -> int:
        return self.n_buckets + self.offset

    @property
    def coordinate_names(self) -> tuple[FeatureName, ...]:
        return self._with_bias(tuple(f"h{i}" for i in range(self.n_buckets)))

    def bucket(self, name: Hashable) -> tuple[int, float]:
        """(coordinate, sign) of a feature name."""
        code = self._column_code(name)
        return code >> 1, -1.0 if code & 1 else 1.0

    def _column_code(self, name: Hashable) -> int:
        """``column << 1 | negative`` of a name (BLAKE2b: from the cache when it is there)."""
        if self.hash == "murmur3":
            return self._murmur_code(name)
        if type(name) is str:
            cached = self._cache.get(name)
            if cached is not None:
                return cached
        code = self._blake2b_code(name)
        if type(name) is str:
            if len(self._cache) >= HASH_CACHE_SIZE:
                self._cache.clear()
            self._cache[name] = code
        return code

    def _murmur_code(self, name: Hashable) -> int:
        if not isinstance(name, str):
            raise bad_name(name, MURMUR_NAMES)
        try:
            key = name.encode("utf-8")
        except UnicodeEncodeError:
            raise FeatureError(
                "bad_feature_name", f"feature name {name!r:.40} is not valid Unicode"
            ) from None
        h = mmh3.hash(key, MURMUR_SEED, True)
        return (murmur_bucket(h, self.n_buckets) + self.offset) << 1 | (h < 0)

    def _murmur_columns(
        self, names: list[Any]
    ) -> tuple[NDArray[np.int64], NDArray[np.bool_]] | None:
        """Columns and signs of many names at C speed, or ``None`` when one is not a valid str.

        One join both checks that every name is a str and, encoded, that it is valid Unicode:
        ``mmh3`` must never see a lone surrogate (it crashes on one).
        """
        try:
            NAME_SEPARATOR.join(names).encode("utf-8")
        except (TypeError, UnicodeEncodeError):
            return None
        hashes = np.fromiter(map(mmh3.hash, names), dtype=np.int64, count=len(names))
        buckets = np.abs(hashes) % self.n_buckets
        buckets[hashes == INT32_MIN] = murmur_bucket(INT32_MIN, self.n_buckets)
        return buckets + self.offset, hashes < 0

    def join_names(self, rows: Sequence[Mapping[Any, Any]]) -> bytes | None:
        """Every name of ``rows`` (mappings), in order, joined by :data:`NAME_SEPARATOR` as
        UTF-8: the string the murmur3 batch path hashes (see :meth:`ObjectEncoder.join_names`);
        ``None`` for BLAKE2b or when a name is not a str of valid Unicode (the join checks both).

        Examples
        --------
        >>> HashingEncoder(4).join_names([{"a": 1.0, "é": 2.0}, {"b": 3.0}])
        b'a\\x00\\xc3\\xa9\\x00b'
        >>> HashingEncoder(4).join_names([{1: 1.0}]) is None
        True
        """
        if self.hash != "murmur3":
            return None
        try:
            return NAME_SEPARATOR.join(chain.from_iterable(rows)).encode("utf-8")
        except (TypeError, UnicodeEncodeError):
            return None

    def _compiled_batch(
        self, joined: bytes, values: NDArray[np.float64], lengths: list[int]
    ) -> CSRBatch | None:
        """murmur3 rows of a whole batch in one compiled call (:func:`._murmur.hashed_batch`)
        from :meth:`join_names`'s bytes, each bit for bit :meth:`encode_sparse`'s; ``None`` when
        the compiled path cannot vouch for a row."""
        if self.hash != "murmur3":
            return None
        rows = len(lengths)
        capacity = values.shape[0] + rows * self.offset
        indptr = np.empty(rows + 1, dtype=np.int64)
        columns = np.empty(capacity, dtype=np.int64)
        data = np.empty(capacity)
        counts = np.asarray(lengths, dtype=np.int64)
        offset = self.offset
        total = hashed_batch(
            joined, values, counts, self.n_buckets, offset, MAX_ABS_FEATURE, indptr, columns, data
        )
        if total < 0:
            return None
        return CSRBatch(indptr, columns[:total], data[:total], self.dimension)

    def _blake2b_code(self, name: Hashable) -> int:
        checked = check_name(name)
        key = f"s:{checked}" if isinstance(checked, str) else f"i:{checked}"
        digest = hashlib.blake2b(
            key.encode("utf-8", "surrogatepass"), digest_size=HASH_DIGEST_BYTES
        ).digest()
        value = int.from_bytes(digest, "little")
        column = (value & (self.n_buckets - 1)) + self.offset
        return column << 1 | (value >> SIGN_BIT) & 1

    def encode(self, features: Any, *, grow: bool = False) -> NDArray[np.float64]:
        columns, values = self._entries(self._mapping(features), grow)
        return assemble(self.dimension, self.bias, columns, values)

    def encode_sparse(self, features: Any, *, grow: bool = False) -> SparseRow:
        mapping = self._mapping(features)
        content = self._murmur_content(mapping)
        if content is not None:
            size = len(mapping) + self.offset
            columns = np.empty(size, dtype=np.int64)
            values = np.empty(size)
            n = self._hashed_row(content, len(mapping), columns, values)
            if n >= 0:
                return columns[:n], values[:n]
        return self._sparse_row(*self._entries(mapping, grow))

    def encode_sparse_into(
        self,
        features: Any,
        columns: NDArray[np.int64],
        values: NDArray[np.float64],
        *,
        grow: bool = False,
        previous: RowKey | None = None,
    ) -> tuple[int, RowKey | None]:
        """:meth:`encode_sparse` written to the start of ``columns`` / ``values`` (writable,
        C-contiguous int64 and float64 arrays of at least ``max_features_per_event + 1``
        entries): (the row's length, its key or ``None``).
        The learners' single-event path: it hands no arrays back (boxing them costs more than
        the row).

        A murmur3 row comes with a key naming the event's content (:data:`RowKey`). Passing it
        back as ``previous`` — with the buffers still holding that row — skips the work when
        the next event has the same content (a predict-then-learn loop encodes each event
        twice): nothing is written and ``previous`` is returned.
        """
        mapping = self._mapping(features)
        content = self._murmur_content(mapping)
        if content is not None:
            if previous is not None and previous[0] == content[0] and previous[1] == content[1]:
                return previous[2], previous
            n = self._hashed_row(content, len(mapping), columns, values)
            if n >= 0:
                return n, (*content, n)
        return self._into(self._sparse_row(*self._entries(mapping, grow)), columns, values), None

    def _murmur_content(self, mapping: Mapping[Any, Any]) -> tuple[bytes, bytes] | None:
        """(names, values) of a murmur3 event as the compiled builder takes them, or ``None``
        when a name is not a valid str or a value not a plain number (the precise path, which
        names any error).

        The names are joined into one UTF-8 string (the join also checks that each is a str and
        valid Unicode: a lone surrogate has no UTF-8 bytes to hash), the values packed as float64.
        Equal content means the same row: the bytes are the names and the values bit for bit.
        """
        if self.hash != "murmur3":
            return None
        raw = mapping.values()
        if not PLAIN_NUMBER_TYPES.issuperset(map(type, raw)):
            return None
        try:
            names = NAME_SEPARATOR.join(mapping).encode("utf-8")
            packed = struct.pack(packed_format(len(mapping)), *raw)
        except (TypeError, UnicodeEncodeError, struct.error):  # struct.error: an int beyond floats
            return None
        return names, packed

    def _hashed_row(
        self,
        content: tuple[bytes, bytes],
        count: int,
        columns: NDArray[np.int64],
        values: NDArray[np.float64],
    ) -> int:
        """The row of ``content`` written to ``columns`` / ``values`` by one compiled call
        (:mod:`._murmur`), bit for bit the precise path's; its length, or -1 when the compiled
        path cannot vouch for it (the precise path then decides)."""
        names, packed = content
        return int(
            hashed_row_entry()(
                names, packed, count, 1 << self.n_bits, 1 if self.bias else 0, MAX_ABS_FEATURE,
                columns, values,
            )
        )  # fmt: skip

    def _entries(self, mapping: Mapping[Any, Any], grow: bool) -> tuple[list[int], list[float]]:
        code_of = self._column_code
        pairs = [(code_of(name), checked_value(name, raw)) for name, raw in mapping.items()]
        sums: dict[int, float] = {}
        for code, number in pairs:
            column = code >> 1
            sums[column] = sums.get(column, 0.0) + (-number if code & 1 else number)
        for column in sorted(sums):
            total = sums[column]
            if not -MAX_ABS_FEATURE <= total <= MAX_ABS_FEATURE:
                raise value_error(column, total)
        return list(sums), list(sums.values())

    def _batch_columns(
        self, names: list[Any], grow: bool
    ) -> tuple[NDArray[np.int64], NDArray[np.bool_] | None] | None:
        if self.hash == "murmur3":
            return self._murmur_columns(names)
        if not set(map(type, names)) <= {str}:
            return None
        try:
            codes = np.fromiter(
                map(self._cache.__getitem__, names), dtype=np.int64, count=len(names)
            )
        except KeyError:
            try:
                codes = np.fromiter(map(self._column_code, names), dtype=np.int64, count=len(names))
            except FeatureError:
                return None
        return codes >> 1, (codes & 1).astype(bool)

    def to_state(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "n_bits": self.n_bits,
            "bias": self.bias,
            "hash": self.hash,
            "max_features_per_event": self.max_features_per_event,
        }

    def __repr__(self) -> str:
        return (
            f"HashingEncoder(n_bits={self.n_bits}, bias={self.bias}, hash={self.hash!r}, "
            f"max_features_per_event={self.max_features_per_event})"
        )
