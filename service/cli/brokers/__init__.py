"""The brokers novikoff starts: an Apache Kafka (KRaft, one node) and an embedded Tansu.

The modules here import only the standard library at import time, except :mod:`.tansu` and
:mod:`.apache`; ``python -m service.cli.brokers.distribution`` runs before any virtualenv exists.
"""
