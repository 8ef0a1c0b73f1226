"""The decoding of event records, in parts; :mod:`consumers.decoding.events` is its public face.

* :mod:`~consumers.decoding.wire` — field names, reason codes and limits of the wire format;
* :mod:`~consumers.decoding.batch` — records, rejections and the decoded batch (dense or CSR);
* :mod:`~consumers.decoding.labels` — event labels to encoded targets;
* :mod:`~consumers.decoding.precise` — the exact one-record path and the shared feature checks;
* :mod:`~consumers.decoding.bulk` — the whole-batch checks of the orjson tier.
"""
