"""The Python SDK's own spans, exported when asked: client.py and server.py call
`export_traces_if_asked()` first, so a test sees a real host's and a real server's spans beside the
proxy's in one OTLP receiver."""

from __future__ import annotations

import os


def export_traces_if_asked() -> None:
    """The SDK makes its spans with the global tracer: give it one that exports over OTLP/HTTP to
    OTEL_EXPORTER_OTLP_ENDPOINT (service name from OTEL_SERVICE_NAME), each span as it ends."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return
    from opentelemetry import trace  # noqa: PLC0415
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: PLC0415

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
