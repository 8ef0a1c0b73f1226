"""Mixing mode: one perceptron learned by the partitions of the topic, mixed each round (IPM).

Modules: :mod:`~consumers.mixing.contribution` (the contributions topic's records),
:mod:`~consumers.mixing.ledger` (the deterministic mix), :mod:`~consumers.mixing.shard` (one
partition's round), :mod:`~consumers.mixing.producer` (one transaction per round),
:mod:`~consumers.mixing.runner` (the loop) and :mod:`~consumers.mixing.serving`.
"""
