"""The learner's state outside the process: checkpoint files and the state topic.

* :mod:`~consumers.state.checkpoint` — atomic, checksummed checkpoint files (and their frame);
* :mod:`~consumers.state.topic` — the state topic's records, one compacted record per model;
* :mod:`~consumers.state.chunks` — state records larger than the broker's limit, split in chunks;
* :mod:`~consumers.state.follower` — a replica's reader of the newest valid state record.
"""
