"""Kafka ingestion: decode and validate events, dead-letter the bad ones, apply the good ones to the
learner exactly once, and checkpoint everything atomically.

Subpackages
-----------
decoding
    Record bytes to rows: :mod:`consumers.decoding.events` (the decoder and every public name of
    the wire format), its parts, the compiled JSON reader (:mod:`consumers.decoding.fastjson`),
    the byte scans (:mod:`consumers.decoding.scan`) and the ``ts`` checks.
state
    The learner's state outside the process: the atomic checkpoint store, the state topic's
    records (split into chunks when large) and the replicas' follower of that topic.

Modules
-------
engine
    Learner + bound tracker + counters + partition offsets; immutable snapshots for readers.
reports
    What the engine publishes: the snapshot, per-partition progress, batch / checkpoint / restore
    reports, and the observer protocol.
partitions
    The engine's ledger of each partition (applied offset ranges, counts) and its checkpoint form.
runner
    The kafka-python consumer loop (group, poll and apply, dead letters, reconnects, shutdown).
runner_commits
    The loop's checkpoints, commits, transactions and rebalances.
runner_health
    The loop's connection state: readiness and its reason, faults, backoff.
kafka_clients
    How the loop talks to Kafka: its settings, the consumer protocol, the real clients.
transactions
    Exactly once: its settings, and the owner (restore on assignment, commit per checkpoint).
transactional_producer
    The owner's transactional producer: dead letters, state record and offsets in one transaction.
transactional_client
    kafka-python's transactional producer with bounded waits.
restoring
    The newest committed state among the state topic and the local cache.
ownership
    The single-owner partition assignor (one member of a group learns every partition).
dlq
    The dead-letter writer.
faults
    Consumer errors by kind: which ones retrying fixes, what an operator does about the others.
"""
