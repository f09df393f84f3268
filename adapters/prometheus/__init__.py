"""Metrics on prometheus-client (C5): the worker's and the console's, and the HTTP exporter."""
