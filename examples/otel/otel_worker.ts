/**
 * A worker whose handler makes spans of its own, children of the parent's
 * call span: it reads the call's W3C trace context (`this.traceContext`)
 * with OpenTelemetry's propagator. Its finished spans are kept in memory and
 * returned by `spans()`, so `main.ts` can check them.
 *
 * @module
 */

import {
  context,
  propagation,
  SpanStatusCode,
  trace,
} from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
// In your project: `import { defineWorker } from "@airlock/airlock/worker"`.
import { defineWorker } from "../../worker.ts";

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
trace.setGlobalTracerProvider(provider);
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
const tracer = trace.getTracer("otel-example-worker");

const prices: Record<string, number> = { apple: 3, pear: 4 };

export default defineWorker({
  /** Looks a price up, in a span that joins the caller's trace. */
  price(item: string): number {
    const parent = propagation.extract(
      context.active(),
      this.traceContext ?? {},
    );
    const span = tracer.startSpan("price lookup", {
      attributes: { item },
    }, parent);
    try {
      const price = prices[item];
      if (price === undefined) {
        span.setStatus({ code: SpanStatusCode.ERROR });
        throw new RangeError(`No price for "${item}"`);
      }
      return price;
    } finally {
      span.end();
    }
  },
  /** The spans this worker finished, as plain data. */
  spans() {
    return exporter.getFinishedSpans().map((span) => ({
      name: span.name,
      traceId: span.spanContext().traceId,
      parentSpanId: span.parentSpanContext?.spanId,
    }));
  },
});
