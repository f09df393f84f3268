"""Traces on the OpenTelemetry SDK (C6), the optional extra ``plaita[otel]``.

``environment`` decides from the ``OTEL_*`` variables and imports nothing of OpenTelemetry
unless tracing is on; ``tracer`` (the SDK adapter) is imported only then. Keep this module
free of imports: without the extra, importing the package must work.
"""
