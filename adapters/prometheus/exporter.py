"""Serves a registry to scrapers over HTTP (C5), on the loopback interface only.

It carries no authentication: scrape it through a local agent or a sidecar.
"""

from __future__ import annotations

import logging
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger("plaita.worker.metrics")

EXPORTER_ADDRESS = "127.0.0.1"


class PrometheusExporter:
    """MetricsExporter of ``registry`` on 127.0.0.1:``port`` (0 picks a free port)."""

    def __init__(self, registry: CollectorRegistry, *, port: int) -> None:
        self._registry = registry
        self._port = port
        self._server: WSGIServer | None = None

    def serve(self) -> int:
        self._server, _thread = start_http_server(
            self._port, addr=EXPORTER_ADDRESS, registry=self._registry
        )
        bound = int(self._server.server_address[1])
        log.info("event=metrics.serving address=%s:%d path=/metrics", EXPORTER_ADDRESS, bound)
        return bound

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
