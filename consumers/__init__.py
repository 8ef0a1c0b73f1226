"""Kafka ingestion: decode and validate events, dead-letter the bad ones, apply the good ones to the
learner exactly once, and checkpoint everything atomically.

Modules
-------
events
    Record decoding and validation (fast vectorised path, precise per-record diagnosis).
fastjson
    The compiled JSON blocks of the decoder's fast tier, for other exact-or-silent readers.
dlq
    The dead-letter writer.
checkpoint
    The atomic, checksummed checkpoint store.
state_topic
    The state topic's records (key and checkpoint-framed value) and their reader.
ownership
    The single-owner partition assignor (one member of a group learns every partition).
transactions
    Exactly once: the owner's transactional producer, restore on assignment, commit per checkpoint.
engine
    Learner + bound tracker + counters + partition offsets; immutable snapshots for readers.
runner
    The kafka-python consumer loop (group, rebalances, checkpoints, commits, reconnects).
"""
