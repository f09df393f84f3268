"""Which tracer a process gets (C6): the SDK's when the ``OTEL_*`` variables ask for spans and
the extra is installed, the null tracer otherwise — never an error, never an import of
OpenTelemetry when tracing is off.

An application that configured OpenTelemetry itself (a tracer provider of the SDK set as the
global one before plaita's container is built) gets its spans in that provider, exporters
and all, when the variables say nothing about traces.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
from collections.abc import Mapping

from plaita.application.null_objects import NO_TRACING
from plaita.application.ports import Tracer
from plaita.domain.tracing import ExporterChoice, choose_exporters

log = logging.getLogger("plaita.tracing")

#: What ``pip`` installs for tracing.
EXTRA = "plaita[otel]"


def sdk_installed() -> bool:
    """The OpenTelemetry SDK and its OTLP exporter can be imported (looked up, not imported)."""
    try:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
        )
    except ModuleNotFoundError:  # a missing parent package
        return False


def tracer_from_environment(environ: Mapping[str, str] | None = None) -> Tracer:
    """This process's tracer, from ``environ`` (default: the process's environment)."""
    choice = choose_exporters(os.environ if environ is None else environ)
    for problem in choice.problems:
        log.warning("event=tracing.setting_ignored: %s", problem)
    if choice.unset:
        return _application_tracer() or NO_TRACING
    if not choice.tracing:
        return NO_TRACING
    if not sdk_installed():
        log.warning(
            "event=tracing.sdk_missing exporters=%s: OTEL_TRACES_EXPORTER asks for traces but "
            "the OpenTelemetry SDK is not installed; install %s. Tracing is off, nothing else "
            "changes",
            ",".join(choice.exporters),
            EXTRA,
        )
        return NO_TRACING
    return _sdk_tracer(choice)


@functools.cache
def _sdk_tracer(choice: ExporterChoice) -> Tracer:
    # One provider a process: every container built in it (plaita dev, tests of a command)
    # shares its exporters and background threads.
    from plaita.adapters.otel.tracer import OtelTracer, provider_from_environment

    provider = provider_from_environment(choice.exporters)
    log.info("event=tracing.on exporters=%s", ",".join(choice.exporters))
    return OtelTracer(provider, install_globally=True)


def _application_tracer() -> Tracer | None:
    """The application's own SDK provider, when it set one before asking for plaita's."""
    # Only an application that imported the SDK can have set an SDK provider; the API alone
    # is imported by others (FastAPI) and tells nothing.
    if "opentelemetry.sdk.trace" not in sys.modules:
        return None
    from plaita.adapters.otel.tracer import OtelTracer, global_sdk_provider

    provider = global_sdk_provider()
    return None if provider is None else OtelTracer(provider)
