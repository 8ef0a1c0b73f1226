"""The ``novikoff`` command line and what only it runs.

* :mod:`~service.cli.main` — the ``novikoff`` command (``serve``, ``produce``, ``fit``, ``demo``,
  ``broker``);
* :mod:`~service.cli.produce` and :mod:`~service.cli.synthetic` — a producer of synthetic events;
* :mod:`~service.cli.demo` — an embedded broker, the service and a producer in one command;
* :mod:`~service.cli.offline` — offline epochs over a file (``novikoff fit``);
* :mod:`~service.cli.broker` and :mod:`~service.cli.brokers` — local brokers (Apache Kafka, Tansu).

Nothing here is imported at import time of the package: ``python -m
service.cli.brokers.distribution`` runs before any virtualenv exists.
"""
