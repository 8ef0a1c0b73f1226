"""Metrics, the stats history of the dashboard and the logs."""
