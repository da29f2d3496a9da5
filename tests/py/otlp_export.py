"""Export one span with the official OpenTelemetry Python SDK and its OTLP/HTTP (protobuf)
exporter (PyPI `opentelemetry-exporter-otlp-proto-http`) to the collector at argv[1] (a base
URL; spans go to <base>/v1/traces), then print its trace and span ids (hex) as one JSON line.

Used by tests/interop/otlp_receiver.rs to check the test receiver against the official exporter.
"""

import json
import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind


def main() -> None:
    endpoint = sys.argv[1].rstrip("/") + "/v1/traces"
    provider = TracerProvider(resource=Resource.create({"service.name": "python-exporter"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=10)))
    tracer = provider.get_tracer("otlp-export-check")
    with tracer.start_as_current_span("resources/read", kind=SpanKind.SERVER) as span:
        span.set_attribute("mcp.method.name", "resources/read")
        span.set_attribute("jsonrpc.request.id", 7)
        span.set_attribute("mcp_proxy.cached", True)
        context = span.get_span_context()
    provider.shutdown()
    ids = {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}
    print(json.dumps(ids), flush=True)


if __name__ == "__main__":
    main()
