"""What the service tells about itself.

* :mod:`~service.observability.metrics` — every ``novikoff_*`` Prometheus metric;
* :mod:`~service.observability.snapshot_collector` — the learning metrics, read from the engine's
  snapshot at scrape time;
* :mod:`~service.observability.history` — the stats history the dashboard draws;
* :mod:`~service.observability.logs` — process-wide logging (plain lines or JSON lines).
"""
