"""Feature encoders: one event's features → the augmented float64 vector x̃.

x̃ puts the bias coordinate x₀ = 1 **first** when ``bias=True`` (the seeds' convention), then
the features. Four encoders cover the ways events arrive:

* :class:`DenseEncoder` — a sequence of numbers of fixed length (``sparse = False``);
* :class:`SchemaEncoder` — a mapping over a declared set of names (absent names are 0);
* :class:`VocabularyEncoder` — a mapping whose names are learned as they appear (river style:
  features may appear or disappear mid-stream; absent names are 0);
* :class:`HashingEncoder` — signed feature hashing of names into 2^b buckets, for open
  vocabularies of unbounded size (scikit-learn's ``FeatureHasher`` by default).

The three object-valued encoders (``sparse = True``) also encode to the sparse form:
``encode_sparse`` gives one event's (columns, values), ``encode_sparse_batch`` a
:class:`~learning.sparse.CSRBatch`, without ever building a dense row of the model's width; its
``to_dense()`` equals ``encode_batch`` bit for bit. Both forms share one validation.

Encoding never mutates the encoder unless ``grow=True`` is passed (only the vocabulary encoder
grows), so predictions on untrusted input cannot change the model. Bad input raises
:class:`~learning.errors.FeatureError` with a stable code.

:func:`murmur3_32` and :func:`murmur_bucket` are the hashing encoder's compiled hash and bucket
(numba functions), for compiled code that hashes names where it reads them (the consumer's
reader of hashed events), so it buckets exactly as the encoder does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from learning.encoders._common import (
    BIAS_NAME,
    DEFAULT_MAX_FEATURES_PER_EVENT,
    MAX_ABS_FEATURE,
    Encoder,
    FeatureName,
    RowKey,
    SparseEncoder,
    SparseRow,
    as_sparse,
    numeric_value,
)
from learning.encoders._murmur import murmur3_32, murmur_bucket
from learning.encoders.dense import DenseEncoder
from learning.encoders.hashing import (
    DEFAULT_HASH,
    DEFAULT_HASH_BITS,
    HASHES,
    LEGACY_HASH,
    MAX_HASH_BITS,
    HashingEncoder,
    HashName,
)
from learning.encoders.named import DEFAULT_MAX_FEATURES, SchemaEncoder, VocabularyEncoder

logger = logging.getLogger(__name__)

__all__ = [
    "BIAS_NAME",
    "DEFAULT_HASH",
    "DEFAULT_HASH_BITS",
    "DEFAULT_MAX_FEATURES",
    "DEFAULT_MAX_FEATURES_PER_EVENT",
    "HASHES",
    "MAX_ABS_FEATURE",
    "MAX_HASH_BITS",
    "DenseEncoder",
    "Encoder",
    "FeatureName",
    "HashName",
    "HashingEncoder",
    "RowKey",
    "SchemaEncoder",
    "SparseEncoder",
    "SparseRow",
    "VocabularyEncoder",
    "as_sparse",
    "encoder_from_state",
    "murmur3_32",
    "murmur_bucket",
    "numeric_value",
]


def encoder_from_state(meta: Mapping[str, Any]) -> Encoder:
    """Rebuild an encoder from :meth:`to_state` data (``KeyError``/``ValueError`` if malformed).

    State saved before the per-event bound and the hash choice existed loads with the default
    bound and BLAKE2b hashing (what those models were trained with).
    """
    kind = meta["kind"]
    bias = bool(meta["bias"])
    limit = int(meta.get("max_features_per_event", DEFAULT_MAX_FEATURES_PER_EVENT))
    if kind == DenseEncoder.kind:
        return DenseEncoder(int(meta["n_features"]), bias=bias)
    if kind == SchemaEncoder.kind:
        return SchemaEncoder(list(meta["names"]), bias=bias, max_features_per_event=limit)
    if kind == VocabularyEncoder.kind:
        return VocabularyEncoder.from_vocabulary(
            list(meta["vocabulary"]),
            bias=bias,
            max_features=int(meta["max_features"]),
            max_features_per_event=limit,
        )
    if kind == HashingEncoder.kind:
        name = meta.get("hash", LEGACY_HASH)
        if name not in HASHES:
            raise ValueError(f"unknown hash {name!r}")
        return HashingEncoder(
            int(meta["n_bits"]), bias=bias, hash=name, max_features_per_event=limit
        )
    raise ValueError(f"unknown encoder kind {kind!r}")
