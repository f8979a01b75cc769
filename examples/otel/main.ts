// deno-lint-ignore-file no-console
/**
 * OpenTelemetry spans for airlock calls, with no OpenTelemetry inside
 * airlock: `airlock_otel.ts` subscribes to airlock's diagnostics channels
 * and makes a client span per call (RPC semantic conventions); the call
 * carries the span's W3C trace context into the worker, whose own span joins
 * the same trace. Spans go to the SDK's in-memory exporter, and this program
 * checks the trace it got (it exits non-zero if anything is off).
 *
 * Run from this folder after `npm ci`:
 *
 *     deno run -A main.ts        # or: bun main.ts
 *
 * In your project, import from `@airlock/airlock` instead of `../../mod.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { context, propagation, SpanKind, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { oneShot, RemoteError, session } from "../../mod.ts";
import { instrumentAirlock } from "./airlock_otel.ts";
import type priced from "./otel_worker.ts";

// The usual SDK set-up: a provider, a context manager, the W3C propagator.
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
trace.setGlobalTracerProvider(provider);
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
const tracer = trace.getTracer("otel-example");
const uninstrument = instrumentAirlock(tracer);

const worker = new URL("./otel_worker.ts", import.meta.url);

const root = await tracer.startActiveSpan("checkout", async (span) => {
  try {
    await using s = await session<typeof priced>(worker);
    const apple = await s.price("apple");
    const missing = await s.price("kiwi").then(() => undefined, (e) => e);
    assert.ok(missing instanceof RemoteError, "kiwi has no price");
    const fresh = oneShot<typeof priced>(worker);
    const pear = await fresh.price("pear");
    console.log(`apple ${apple}, pear ${pear}, kiwi: ${missing.message}`);
    return { span, workerSpans: await s.spans() };
  } finally {
    span.end();
  }
});
uninstrument();

// The parent's spans: the root, and a client span per call below it.
const rootContext = root.span.spanContext();
const calls = exporter.getFinishedSpans().filter((span) =>
  span.attributes["rpc.system"] === "airlock"
);
const byMethod = (method: string): ReadableSpan[] =>
  calls.filter((span) => span.attributes["rpc.method"] === method);
assert.equal(byMethod("price").length, 3, "three price calls, three spans");
assert.equal(byMethod("spans").length, 1);
for (const span of calls) {
  assert.equal(span.kind, SpanKind.CLIENT);
  assert.equal(span.spanContext().traceId, rootContext.traceId);
  assert.equal(span.parentSpanContext?.spanId, rootContext.spanId);
  assert.equal(span.attributes["rpc.service"], "otel_worker.ts");
  assert.equal(typeof span.attributes["airlock.worker.pid"], "number");
}
const failed = calls.filter((span) => span.attributes["error.type"]);
assert.equal(failed.length, 1, "one failed call");
assert.equal(failed[0]!.attributes["error.type"], "RangeError");
assert.deepEqual(
  calls.map((span) => span.attributes["airlock.mode"]).sort(),
  ["oneShot", "session", "session", "session"],
);

// The worker's spans: in the same trace, each a child of its call's span.
const sessionPrices = byMethod("price").filter((span) =>
  span.attributes["airlock.mode"] === "session"
);
assert.equal(root.workerSpans.length, 2);
for (const [index, span] of root.workerSpans.entries()) {
  assert.equal(span.name, "price lookup");
  assert.equal(span.traceId, rootContext.traceId);
  assert.equal(
    span.parentSpanId,
    sessionPrices[index]!.spanContext().spanId,
    "the worker's span is a child of the call's span",
  );
}

console.log(`trace ${rootContext.traceId}:`);
console.log(`  checkout`);
for (const span of calls) {
  const error = span.attributes["error.type"];
  console.log(
    `    ${span.name} (${span.attributes["airlock.mode"]}, pid ${
      span.attributes["airlock.worker.pid"]
    }${error ? `, error.type ${error}` : ""})`,
  );
  for (const child of root.workerSpans) {
    if (child.parentSpanId === span.spanContext().spanId) {
      console.log(`      ${child.name} (in the worker)`);
    }
  }
}
await provider.shutdown();
