"""The ``novikoff`` command line and what only it runs (producers, demo, local brokers)."""
