"""The running process: HTTP API, command line, metrics, around one engine and one consumer.

Modules here assemble the process; the subpackages serve its audiences.

* :mod:`service.settings` — the one frozen settings object (TOML + ``NOVIKOFF_*`` variables);
* :mod:`service.model` — the learner and bound tracker the settings describe;
* :mod:`service.assembly` — builds and runs the service (engine, consumer runner, HTTP server);
* :mod:`service.replica` — the read replica that follows the state topic;
* :mod:`service.topics` — creates the Kafka topics the service needs;
* ``service/http/`` — the HTTP API, its auth and the dashboard;
* ``service/cli/`` — the ``novikoff`` command, producers, the demo and local brokers;
* ``service/observability/`` — Prometheus metrics, the stats history and the logs.
"""
