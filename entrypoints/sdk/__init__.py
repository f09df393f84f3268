"""The Python API behind ``import plaita`` (ADR 0020): the flow builder, the client and its
execution handles, the embedded worker and the blocking client. ``plaita/__init__.py``
re-exports them; application code imports ``plaita``, never this package."""
