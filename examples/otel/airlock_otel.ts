/**
 * The bridge from airlock's diagnostics channels to OpenTelemetry: a client
 * span per call, following the RPC semantic conventions, whose W3C trace
 * context travels into the worker. airlock does not depend on
 * OpenTelemetry: this file is all it takes, copy it into your project.
 *
 * @module
 */

import dc from "node:diagnostics_channel";
import {
  context,
  propagation,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
} from "@opentelemetry/api";
import {
  type CallTraceContext,
  DIAGNOSTICS_CHANNELS,
  type WorkerExitEvent,
} from "../../diagnostics.ts";

/**
 * Makes a span of every airlock call, child of the span active where the
 * call was made, and hands its trace context to the call (the worker's
 * handler reads it as `this.traceContext`). Attributes: `rpc.system`
 * (`"airlock"`), `rpc.service` (the worker module), `rpc.method` (the op),
 * `airlock.mode`, `airlock.worker.pid` and `airlock.attempt`; on failure
 * `error.type` (the error's name) and an error status. A worker that
 * crashes adds an event to the span active where it was noticed (none here:
 * logged as a span of its own instead).
 *
 * @param tracer The tracer to make spans with.
 * @returns A function that unsubscribes.
 */
export function instrumentAirlock(tracer: Tracer): () => void {
  const calls = dc.tracingChannel<CallTraceContext, CallTraceContext>(
    DIAGNOSTICS_CHANNELS.call,
  );
  const spans = new WeakMap<CallTraceContext, Span>();
  const handlers = {
    start(message: CallTraceContext) {
      // Published synchronously inside call(): the caller's context.
      const parent = context.active();
      const span = tracer.startSpan(`${message.module}/${message.op}`, {
        kind: SpanKind.CLIENT,
        attributes: {
          "rpc.system": "airlock",
          "rpc.service": message.module,
          "rpc.method": message.op,
          "airlock.mode": message.mode,
        },
      }, parent);
      spans.set(message, span);
      const carrier: { traceparent?: string; tracestate?: string } = {};
      propagation.inject(trace.setSpan(parent, span), carrier);
      if (carrier.traceparent) message.traceparent = carrier.traceparent;
      if (carrier.tracestate) message.tracestate = carrier.tracestate;
    },
    end() {},
    asyncStart() {},
    error(message: CallTraceContext) {
      const span = spans.get(message);
      if (!span) return;
      const error = message.error;
      const type = error instanceof Error ? error.name : typeof error;
      span.setAttribute("error.type", type);
      span.setStatus({
        code: SpanStatusCode.ERROR,
        message: error instanceof Error ? error.message : String(error),
      });
    },
    asyncEnd(message: CallTraceContext) {
      const span = spans.get(message);
      if (!span) return;
      spans.delete(message);
      if (message.pid !== undefined) {
        span.setAttribute("airlock.worker.pid", message.pid);
      }
      span.setAttribute("airlock.attempt", message.attempt);
      span.end();
    },
  };
  calls.subscribe(handlers);
  const onExit = (message: unknown) => {
    const exit = message as WorkerExitEvent;
    if (exit.requested) return;
    // A crash: a short span of its own, so it shows in the trace backend.
    tracer.startSpan(`${exit.module} worker crashed`, {
      attributes: {
        "airlock.worker.pid": exit.pid,
        "airlock.mode": exit.mode,
        "process.exit.code": exit.exitCode ?? -1,
        "airlock.signal": exit.signal ?? "",
      },
    }).end();
  };
  dc.subscribe(DIAGNOSTICS_CHANNELS.workerExit, onExit);
  return () => {
    calls.unsubscribe(handlers);
    dc.unsubscribe(DIAGNOSTICS_CHANNELS.workerExit, onExit);
  };
}
