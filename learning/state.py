"""Saving and loading learners and trackers: versioned, checksummed, no pickle.

Layout of a state blob (all integers little-endian)::

    b"NOVIKOFF"                 8-byte magic
    uint32 format version       refused unless it is FORMAT_VERSION
    uint64 header length h
    header                      h bytes of UTF-8 JSON: metadata and an array manifest
    payload                     raw array bytes, each at the offset the manifest gives
    sha256                      32-byte digest of everything before it

Arrays are stored as their raw little-endian bytes, so a round trip is bit-exact (weights,
averaging sums, the voters' update log, counters, the generator state). The learner's arrays are
sparse (format version 2): only the coordinates learning has touched (flat indices into the
weights, with their weight, averaging sum and birth time) and the voters' update log, so a state
grows with updates x non-zeros, not with the dimension; version 1 (dense) blobs are refused with
a :class:`~learning.errors.StateError` saying so. Metadata (hyperparameters, labels,
vocabulary) is JSON. The form is canonical: two learners in the same state give the same bytes,
whatever batch sizes brought them there. Loading verifies magic, version and checksum before
parsing anything, then checks every array's dtype and shape against the manifest and the model's
own invariants, and raises :class:`~learning.errors.StateError` on any mismatch.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from learning import _kernels as k
from learning._arrays import LinearState
from learning._base import LinearLearner
from learning.averaged import AveragedPerceptron
from learning.bounds import BoundTracker
from learning.encoders import encoder_from_state
from learning.errors import StateError
from learning.labels import ClassIndex, LabelMap
from learning.multiclass import MulticlassPerceptron
from learning.perceptron import Perceptron
from learning.voted import VotedPerceptron

logger = logging.getLogger(__name__)

MAGIC = b"NOVIKOFF"
FORMAT_VERSION = 2
OLD_DENSE_VERSION = 1
"""Version 1 stored dense weights and dense voter copies; it is refused (see load_state)."""
PREAMBLE = struct.Struct("<8sIQ")
DIGEST_SIZE = hashlib.sha256().digest_size
ALIGNMENT = 8
ALLOWED_DTYPES = frozenset({"<f8", "<i8", "<u8", "|b1"})

BINARY_KINDS: dict[str, type[Perceptron]] = {
    cls.__name__: cls for cls in (Perceptron, AveragedPerceptron, VotedPerceptron)
}
LEARNER_KINDS: dict[str, type[LinearLearner]] = {
    **BINARY_KINDS,
    MulticlassPerceptron.__name__: MulticlassPerceptron,
}


def _json_safe(value: Any, what: str) -> Any:
    """Check ``value`` survives JSON exactly (scalars of JSON types, finite floats)."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise StateError(f"{what}: {value!r} cannot be saved (not finite)")
        return value
    if isinstance(value, list | tuple):
        return [_json_safe(item, what) for item in value]
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise StateError(f"{what}: mapping keys must be strings")
        return {key: _json_safe(item, what) for key, item in value.items()}
    raise StateError(f"{what}: {type(value).__name__} {value!r:.60} cannot be saved as JSON")


def _learner_meta(learner: LinearLearner) -> dict[str, Any]:
    kind = type(learner).__name__
    if kind not in LEARNER_KINDS:
        raise StateError(f"cannot save a {kind}")
    meta: dict[str, Any] = {
        "kind": kind,
        "params": learner._params(),
        "encoder": learner.encoder.to_state(),
    }
    if isinstance(learner, MulticlassPerceptron):
        meta["params"]["seed"] = learner.seed
        meta["classes"] = learner._classes.to_state()
        labels = list(learner.class_labels)
    elif isinstance(learner, Perceptron):
        meta["label_map"] = learner.label_map.to_state()
        labels = list(learner.label_map.labels)
    for label in labels:
        _json_scalar(label, "labels")
    return _json_safe(meta, "learner")  # type: ignore[no-any-return]


def _json_scalar(value: Any, what: str) -> None:
    """Labels must come back as the same hashable value: JSON scalars only."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is not None and not isinstance(value, bool | int | float | str):
        raise StateError(f"{what}: {type(value).__name__} {value!r:.60} cannot be saved")


def _learner_from(meta: Mapping[str, Any], arrays: Mapping[str, NDArray[Any]]) -> LinearLearner:
    kind = meta["kind"]
    if kind not in LEARNER_KINDS:
        raise StateError(f"unknown learner kind {kind!r}")
    encoder = encoder_from_state(meta["encoder"])
    params = dict(meta["params"])
    learner: LinearLearner
    if kind == MulticlassPerceptron.__name__:
        classes = ClassIndex.from_state(meta["classes"])
        declared = list(classes.labels) if classes.declared else None
        multiclass = MulticlassPerceptron(declared, encoder=encoder, **params)
        multiclass._classes = classes
        learner = multiclass
    else:
        binary = BINARY_KINDS[kind]
        learner = binary(LabelMap.from_state(meta["label_map"]), encoder=encoder, **params)
    state = LinearState.from_sparse_arrays(arrays)
    expected_rows = learner._rows()
    if state.rows != expected_rows:
        raise StateError(f"weights have {state.rows} rows for {expected_rows} classes")
    if state.dimension > encoder.dimension:
        raise StateError(
            f"weights cover {state.dimension} coordinates, the encoder only {encoder.dimension}"
        )
    if state.touched_rows != learner._state.touched_rows:
        raise StateError(f"voter log of {state.touched_rows} rows for a {kind}")
    if state.counter(k.N_VOTERS) > learner.max_voters:
        raise StateError(f"{state.counter(k.N_VOTERS)} voters exceed max_voters")
    if state.log_cols.shape[0] > learner._max_entries:
        raise StateError(f"{state.log_cols.shape[0]} voter log entries exceed max_voter_bytes")
    learner._state = state
    return learner


def _manifest(
    groups: Mapping[str, Mapping[str, NDArray[Any]]],
) -> tuple[list[dict[str, Any]], list[NDArray[Any]]]:
    """The manifest of ``groups``' arrays and the arrays as stored (C order, little-endian)."""
    manifest: list[dict[str, Any]] = []
    stored: list[NDArray[Any]] = []
    offset = 0
    for group, arrays in groups.items():
        for name, array in arrays.items():
            data = np.ascontiguousarray(array)
            dtype = data.dtype.newbyteorder("<") if data.dtype.byteorder == ">" else data.dtype
            data = data.astype(dtype, copy=False)
            manifest.append(
                {
                    "group": group,
                    "name": name,
                    "dtype": data.dtype.str,
                    "shape": list(data.shape),
                    "offset": offset,
                    "nbytes": data.nbytes,
                }
            )
            stored.append(data)
            offset += data.nbytes + _padding(data.nbytes)
    return manifest, stored


def _padding(nbytes: int) -> int:
    """Zero bytes after an array of ``nbytes``: the next one starts at a multiple of ALIGNMENT."""
    return (-nbytes) % ALIGNMENT


def dump_state(
    learner: LinearLearner,
    tracker: BoundTracker | None = None,
    extra: Mapping[str, Any] | None = None,
) -> bytes:
    """Serialise a learner, an optional tracker and caller data into one checksummed blob.

    Parameters
    ----------
    learner
        Any perceptron learner.
    tracker
        Saved with the learner when given.
    extra
        JSON-able data saved atomically with the model (e.g. partition offsets).

    Examples
    --------
    >>> from learning import Perceptron
    >>> model = Perceptron()
    >>> _ = model.learn_one({"a": 1.0}, True)
    >>> learner, tracker, extra = load_state(dump_state(model, extra={"offset": 7}))
    >>> learner.weights.tolist(), tracker, extra
    ([1.0, 1.0], None, {'offset': 7})
    """
    # Canonical form: the touched coordinates only and the voters' log oldest first, so equal
    # models give equal bytes whatever batch sizes they were trained with.
    groups: dict[str, Mapping[str, NDArray[Any]]] = {"learner": learner._state.sparse_arrays()}
    tracker_meta = None
    if tracker is not None:
        tracker_meta, tracker_arrays = tracker.to_state()
        tracker_meta = _json_safe(tracker_meta, "tracker")
        groups["tracker"] = tracker_arrays
    manifest, arrays = _manifest(groups)
    header = {
        "format": "novikoff-state",
        "version": FORMAT_VERSION,
        "learner": _learner_meta(learner),
        "tracker": tracker_meta,
        "extra": _json_safe(dict(extra or {}), "extra"),
        "arrays": manifest,
    }
    header_bytes = json.dumps(header, allow_nan=False, separators=(",", ":")).encode("utf-8")
    # The blob is written once, into one buffer: a checkpoint holds the model's arrays and one
    # copy of their bytes at a time (BytesIO.getvalue hands its buffer over without copying).
    blob = io.BytesIO()
    blob.write(PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(header_bytes)))
    blob.write(header_bytes)
    for array in arrays:
        blob.write(array.data)
        blob.write(bytes(_padding(array.nbytes)))
    with blob.getbuffer() as body:
        digest = hashlib.sha256(body).digest()
    blob.write(digest)
    return blob.getvalue()


def _verified_header(blob: bytes) -> tuple[dict[str, Any], memoryview]:
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise StateError(f"state must be bytes, got {type(blob).__name__}")
    data = memoryview(blob).cast("B")
    if len(data) < PREAMBLE.size + DIGEST_SIZE:
        raise StateError(f"state is too short ({len(data)} bytes) to be a novikoff state")
    magic, version, header_length = PREAMBLE.unpack_from(data)
    if magic != MAGIC:
        raise StateError("not a novikoff state (bad magic bytes)")
    if version == OLD_DENSE_VERSION:
        raise StateError(
            f"state format version {version} (dense weights and voter copies) is no longer read; "
            f"this build reads version {FORMAT_VERSION} (sparse): retrain, or replay the stream"
        )
    if version != FORMAT_VERSION:
        raise StateError(
            f"unsupported state format version {version}; this build reads {FORMAT_VERSION}"
        )
    body, digest = data[:-DIGEST_SIZE], data[-DIGEST_SIZE:]
    if hashlib.sha256(body).digest() != bytes(digest):
        raise StateError("state checksum mismatch: the data is corrupt or truncated")
    header_end = PREAMBLE.size + header_length
    if header_end > len(body):
        raise StateError("state header runs past the end of the data")
    try:
        header = json.loads(bytes(body[PREAMBLE.size : header_end]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StateError(f"state header is not valid JSON: {error}") from None
    if not isinstance(header, dict) or header.get("version") != FORMAT_VERSION:
        raise StateError("state header does not match the format version")
    return header, body[header_end:]


def _arrays(
    manifest: list[dict[str, Any]], payload: memoryview
) -> dict[str, dict[str, NDArray[Any]]]:
    groups: dict[str, dict[str, NDArray[Any]]] = {}
    for entry in manifest:
        dtype = np.dtype(entry["dtype"])
        if dtype.str not in ALLOWED_DTYPES:
            raise StateError(f"array {entry['name']!r} has unsupported dtype {dtype.str}")
        shape = tuple(int(size) for size in entry["shape"])
        if any(size < 0 for size in shape):
            raise StateError(f"array {entry['name']!r} has a negative shape {shape}")
        start, nbytes = int(entry["offset"]), int(entry["nbytes"])
        if (
            nbytes != math.prod(shape) * dtype.itemsize
            or start < 0
            or start + nbytes > len(payload)
        ):
            raise StateError(f"array {entry['name']!r} does not fit its shape or the data")
        array = np.frombuffer(payload[start : start + nbytes], dtype=dtype).reshape(shape).copy()
        groups.setdefault(str(entry["group"]), {})[str(entry["name"])] = array
    return groups


def load_state(blob: bytes) -> tuple[LinearLearner, BoundTracker | None, dict[str, Any]]:
    """Inverse of :func:`dump_state`: ``(learner, tracker or None, extra)``.

    Raises
    ------
    StateError
        Wrong magic, version or checksum, malformed header, or arrays whose dtype or shape does
        not fit the model.
    """
    header, payload = _verified_header(blob)
    try:
        groups = _arrays(list(header["arrays"]), payload)
        learner = _learner_from(header["learner"], groups.get("learner", {}))
        tracker = None
        if header["tracker"] is not None:
            tracker = BoundTracker.from_state(header["tracker"], groups.get("tracker", {}))
        extra = dict(header["extra"])
    except StateError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise StateError(f"state content is malformed: {type(error).__name__}: {error}") from None
    return learner, tracker, extra
