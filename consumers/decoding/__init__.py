"""The decoding of event records: bytes in, a dense or CSR batch and rejections out.

* :mod:`~consumers.decoding.events` — :class:`~consumers.decoding.events.EventDecoder` and every
  public name of the wire format (import from here);
* :mod:`~consumers.decoding.wire` — field names, reason codes and limits of the wire format;
* :mod:`~consumers.decoding.batch` — records, rejections and the decoded batch (dense or CSR);
* :mod:`~consumers.decoding.labels` — event labels to encoded targets;
* :mod:`~consumers.decoding.precise` — the exact one-record path and the shared feature checks;
* :mod:`~consumers.decoding.bulk` — the whole-batch checks of the orjson tier;
* :mod:`~consumers.decoding.fastjson` — the compiled tier (dense events), and the numba JSON
  kernels other exact-or-silent readers (the service's ``POST /predict`` body) build on;
* :mod:`~consumers.decoding.fastsparse` — the compiled tier of murmur3 hashing models (bags of
  words straight to CSR rows);
* :mod:`~consumers.decoding.scan` — byte scans (marker counts, nesting depth);
* :mod:`~consumers.decoding.timestamps` — the ``ts`` field's checks;
* ``_csr`` — CSR batch assembly for object-valued features.
"""
