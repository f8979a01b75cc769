"""The serve loop: read frames, dispatch calls to threads, write answers."""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextvars
import inspect
import os
import platform
import sys
import threading

from ._cbor import MAX_DEPTH
from .context import CallContext, call_context_var
from .decode import decode_lenient, decode_value
from .encode import encode_value
from .errors import AbortError, ProtocolError, ShutdownError, trim_traceback
from .frame import FrameReader, frame_chunks
from .stdio import exit_as_system_exit, exit_now, install_stdout_guard, write_all
from .stream import DEFAULT_STREAM_WINDOW_BYTES, DEFAULT_STREAM_WINDOW_ITEMS, pump
from .values import WireError

#: The message version sent in the hello: 2 adds streams and progress, 3
#: limit, 4 ping/pong (the liveness check) and dropped.
MESSAGE_VERSION = 4


class Call:
    """A call admitted from the parent: its arguments, context and stream window."""

    __slots__ = ("id", "op", "args", "context", "window_items", "window_bytes", "in_flight_items", "in_flight_bytes")

    def __init__(self, call_id, op, args, server=None, window_items=None, window_bytes=None):
        self.id = call_id
        self.op = op
        self.args = args
        self.context = CallContext(call_id, op, server)
        self.window_items = window_items or DEFAULT_STREAM_WINDOW_ITEMS
        self.window_bytes = window_bytes or DEFAULT_STREAM_WINDOW_BYTES
        self.in_flight_items = 0
        self.in_flight_bytes = 0


class Server:
    """Serves one definition over the wire pipes until shutdown or end-of-file."""

    def __init__(self, definition):
        self.definition = definition
        self.wire_in, self.wire_out = install_stdout_guard()
        self.write_lock = threading.Lock()
        self.lock = threading.Condition()
        self.waiting = collections.deque()
        self.running = {}
        self.threads = 0
        self.idle = 0
        # Calls run at once: the definition's, or less after a "limit". A
        # thread takes the next queued call (in arrival order) only once its
        # answer is written, so the parent knows which calls never started.
        self.limit = definition.concurrency
        self.shutting_down = False
        self.acknowledged = False
        self.loop = None
        self.loop_lock = threading.Lock()
        self.ops = list(definition.handlers)
        # Values nest up to MAX_DEPTH levels, two frames each to decode.
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * MAX_DEPTH + 1000))

    # -- output -------------------------------------------------------------

    def send(self, message):
        """Writes one message; returns its payload bytes."""
        head, attachments, area_bytes = encode_value(message, root="")
        chunks = frame_chunks(head, attachments, area_bytes)
        with self.write_lock:
            try:
                for chunk in chunks:
                    write_all(self.wire_out, chunk)
            except OSError:
                # The parent is gone.
                exit_now(0)
        return len(head) + area_bytes

    def answer(self, call_id, value):
        try:
            self.send({"type": "result", "id": call_id, "value": value})
        except TypeError as refusal:
            # The value cannot cross: answer with the TypeError naming where.
            self.fail(call_id, refusal)
        except Exception as error:  # noqa: BLE001 - a value that broke the encoder
            self.fail(call_id, TypeError(f"Cannot send value: {type(error).__name__}: {error}"))

    def fail(self, call_id, error):
        try:
            self.send({"type": "error", "id": call_id, "error": error})
        except Exception as broken:  # noqa: BLE001 - an error that broke the encoder
            text = f"{type(error).__name__} (it could not be sent: {type(broken).__name__}: {broken})"
            self.send({"type": "error", "id": call_id, "error": WireError("Error", text)})

    # -- dispatch -----------------------------------------------------------

    def run(self):
        self.send(
            {
                "type": "hello",
                "id": 0,
                "version": MESSAGE_VERSION,
                "pid": os.getpid(),
                "ops": self.ops,
                "runtime": f"python {platform.python_version()}",
                "concurrency": self.definition.concurrency,
                "idempotent": self.definition.idempotent,
            }
        )
        reader = FrameReader(self.wire_in, self.definition.max_frame_bytes, self.stray)
        while True:
            try:
                frame = reader.read()
                if frame is None:
                    break
                self.handle(*frame)
            except ProtocolError as error:
                sys.stderr.write(f"airlock worker: cannot read from the parent: {error}\n")
                exit_now(2)
            except OSError as error:
                sys.stderr.write(f"airlock worker: cannot read from the parent: {error}\n")
                exit_now(2)
        # End-of-file: the parent is gone (or closed our stdin). Exit promptly.
        exit_now(0)

    def stray(self, count):
        sys.stderr.write(f"airlock worker: ignoring {count} stray bytes on stdin\n")

    def handle(self, head, area):
        try:
            message = decode_value(head, area)
        except TypeError as refusal:
            # Well-formed, but a value Python cannot hold: answer that call.
            message = decode_lenient(head, area)
            if isinstance(message, dict) and message.get("type") == "call" and is_call_id(message.get("id")):
                text = str(refusal).replace("Cannot receive value.", "Cannot receive ", 1)
                self.fail(message["id"], TypeError(text))
                return
            raise ProtocolError(str(refusal)) from None
        if not isinstance(message, dict):
            raise ProtocolError("Cannot read message: the head is not a map")
        kind = message.get("type")
        if kind == "call":
            call_id = message.get("id")
            if not is_call_id(call_id):
                raise ProtocolError(f'Cannot read message: "call" has an invalid id {call_id!r}')
            op = message.get("op")
            if not isinstance(op, str):
                raise ProtocolError('Cannot read message: "call" has no string "op"')
            args = message.get("args", [])
            if args is None:
                args = []
            if not isinstance(args, list):
                raise ProtocolError(f'Cannot read message: "call" {call_id} has args that are not a list')
            windows = []
            for key in ("windowItems", "windowBytes"):
                window = message.get(key)
                if window is not None and (type(window) is not int or window < 1):
                    raise ProtocolError(f'Cannot read message: "call" has an invalid "{key}" {window!r}')
                windows.append(window)
            self.admit(Call(call_id, op, args, self, windows[0], windows[1]))
        elif kind == "credit":
            call_id = message.get("id")
            items = message.get("items")
            size = message.get("bytes")
            if not is_call_id(call_id):
                raise ProtocolError(f'Cannot read message: "credit" has an invalid id {call_id!r}')
            for key, count in (("items", items), ("bytes", size)):
                if type(count) is not int or count < 0:
                    raise ProtocolError(f'Cannot read message: "credit" has an invalid "{key}" {count!r}')
            self.credit(call_id, items, size)
        elif kind == "cancel":
            call_id = message.get("id")
            if not is_call_id(call_id):
                raise ProtocolError(f'Cannot read message: "cancel" has an invalid id {call_id!r}')
            self.cancel(call_id)
        elif kind == "limit":
            concurrency = message.get("concurrency")
            if type(concurrency) is not int or concurrency < 1:
                raise ProtocolError(f'Cannot read message: "limit" has an invalid "concurrency" {concurrency!r}')
            with self.lock:
                self.limit = min(self.definition.concurrency, concurrency)
        elif kind == "ping":
            # Answered by the reading loop at once, whatever the handlers do:
            # the parent's liveness check after a timeout (version 4).
            self.send({"type": "pong", "id": 0})
        elif kind == "shutdown":
            self.shutdown()
        elif kind in ("hello", "fatal", "result", "error", "items", "end", "progress", "pong", "dropped", "shutdown-ack"):
            sys.stderr.write(f'airlock worker: ignoring unexpected "{kind}" message from the parent\n')
        else:
            raise ProtocolError(f"Cannot read message: unknown type {kind!r}")

    def admit(self, call):
        with self.lock:
            if self.shutting_down:
                refused = True
            else:
                refused = False
                self.waiting.append(call)
                # Idle threads that have not woken yet still count as idle.
                if len(self.waiting) > self.idle and self.threads < self.limit:
                    self.threads += 1
                    threading.Thread(target=self.work, name=f"airlock-call-{self.threads}", daemon=True).start()
                # notify_all: streams waiting for credit wait on this lock too,
                # and a single notify could wake one of them, not the idle thread.
                self.lock.notify_all()
        if refused:
            self.fail(
                call.id,
                ShutdownError(f'Cannot run "{call.op}": the worker is shutting down and accepts no new calls'),
            )

    def credit(self, call_id, items, size):
        with self.lock:
            call = self.running.get(call_id)
            if call is None:
                return
            call.in_flight_items = max(0, call.in_flight_items - items)
            call.in_flight_bytes = max(0, call.in_flight_bytes - size)
            self.lock.notify_all()

    def cancel(self, call_id):
        dropped = None
        future = None
        with self.lock:
            call = self.running.get(call_id)
            if call is not None:
                call.context.cancelled.set()
                self.lock.notify_all()
                future = call.context._future
            else:
                for queued in self.waiting:
                    if queued.id == call_id:
                        dropped = queued
                        break
                if dropped is None:
                    return
                self.waiting.remove(dropped)
        if dropped is not None:
            # Never started: the parent learns it was not run (version 4).
            self.send({"type": "dropped", "id": dropped.id})
            self.check_drained()
        elif future is not None:
            future.cancel()

    def shutdown(self):
        with self.lock:
            if self.shutting_down:
                return
            self.shutting_down = True
        self.check_drained()

    def check_drained(self):
        with self.lock:
            if not self.shutting_down or self.running or self.waiting or self.acknowledged:
                return
            self.acknowledged = True
        self.send({"type": "shutdown-ack", "id": 0})
        try:
            atexit._run_exitfuncs()
        except Exception:  # noqa: BLE001 - exit anyway
            pass
        exit_now(0)

    def work(self):
        while True:
            with self.lock:
                while not self.waiting:
                    self.idle += 1
                    self.lock.wait()
                    self.idle -= 1
                call = self.waiting.popleft()
                self.running[call.id] = call
            try:
                contextvars.copy_context().run(self.execute, call)
            finally:
                with self.lock:
                    self.running.pop(call.id, None)
                self.check_drained()

    def execute(self, call):
        handler = self.definition.handlers.get(call.op)
        if handler is None:
            served = ", ".join(f'"{op}"' for op in self.ops) or "no ops"
            self.fail(call.id, TypeError(f'Unknown op "{call.op}": this worker serves {served}'))
            return
        context = call.context
        call_context_var.set(context)
        try:
            if self.definition._wants_context.get(call.op):
                value = handler(*call.args, context=context)
            else:
                value = handler(*call.args)
            if inspect.isawaitable(value):
                value = self.await_on_loop(value, context)
        except SystemExit as stop:
            exit_as_system_exit(stop)
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            context._flush_progress(ending=True)
            self.fail(call.id, AbortError())
            return
        except BaseException as error:  # noqa: BLE001 - every failure is an answer
            trim_traceback(error)
            context._flush_progress(ending=True)
            self.fail(call.id, error)
            return
        if inspect.isgenerator(value) or inspect.isasyncgen(value) or (
            hasattr(value, "__anext__") and hasattr(value, "__aiter__")
        ):
            pump(self, call, value)
            return
        context._flush_progress(ending=True)
        self.answer(call.id, value)

    def await_on_loop(self, awaitable, context):
        loop = self.event_loop()

        async def run():
            return await awaitable

        future = asyncio.run_coroutine_threadsafe(run(), loop)
        with self.lock:
            context._future = future
            cancelled = context.cancelled.is_set()
        if cancelled:
            future.cancel()
        return future.result()

    def event_loop(self):
        with self.loop_lock:
            if self.loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="airlock-asyncio", daemon=True).start()
                self.loop = loop
            return self.loop


def is_call_id(value):
    """Whether a message's ``id`` can name a call."""
    return type(value) is int and value >= 1
