/**
 * Object shapes for the decoder: rows of plain objects with the same keys
 * are common, and an object literal compiled for their key sequence builds
 * each one with its final layout at once (key-by-key stores move an object
 * through a layout per key). This module counts key sequences, compiles
 * the ones seen often enough, and keeps them; the decoder checks each key's
 * bytes against a shape before using it.
 *
 * Compiling is safe and bounded: only identifier keys (never `__proto__`)
 * are ever written into the compiled text, so wire bytes never become code;
 * a sequence is compiled after 16 objects had it, at most 4 per decode and
 * 512 in the life of the process, whatever a worker sends.
 *
 * @module
 */

/** Objects with more keys are built key by key. */
export const MAX_SHAPE_KEYS = 32;
/** Shapes kept; the cache starts over when it is full. */
const MAX_SHAPES = 256;
/**
 * A key sequence is compiled once this many objects had it (compiling costs
 * far more than decoding one object, which rows repay; a worker sending
 * ever new shapes must not make the parent compile for every few bytes it
 * sends).
 */
const SIGHTINGS_TO_COMPILE = 16;
/** New shapes one decode may compile. */
export const MAX_SHAPES_PER_DECODE = 4;
/**
 * Shapes one process compiles in its life, at most: past it, objects are
 * built key by key (correct, slower), so no input can make compiling cost
 * more than this many compiles in all.
 */
const MAX_SHAPES_COMPILED = 512;
/** Key sequences being counted; the table starts over when it is full. */
const MAX_CANDIDATES = 1024;
/** Keys that can be written in an object literal as they are. */
const SHAPE_KEY = /^[A-Za-z_$][\w$]*$/;

/** A key sequence seen often, and a function building its objects. */
export interface Shape {
  /** The keys, in wire order. */
  keys: string[];
  /** The encoded keys (text header and bytes), back to back. */
  bytes: Uint8Array;
  /** Where each key starts in `bytes` (one more entry: the end). */
  starts: Int32Array;
  /** `{ k0: s[b], k1: s[b + 1], … }` as one object literal. */
  build: (stack: unknown[], base: number) => Record<string, unknown>;
}

/** Shapes by their first key. */
const shapes = new Map<string, Shape>();
/** Key sequences not compiled yet, by first key, with how often they came. */
const candidates = new Map<string, { keys: string[]; seen: number }>();
/** Shapes compiled by this process. */
let shapesCompiled = 0;
/** Whether the runtime compiles functions from text (false once refused). */
let canCompile = true;

/**
 * The shape whose first key is `first`, if one was compiled.
 *
 * @param first The object's first key.
 * @returns The shape (its key count and keys still to be checked).
 */
export function shapeOf(first: string): Shape | undefined {
  return shapes.get(first);
}

/**
 * Counts an object's key sequence, and compiles it into a shape once it has
 * been seen often enough and can be one (identifier keys, none repeated).
 *
 * @param keys The object's keys, in wire order.
 * @param source The bytes the keys were read from.
 * @param ranges Where each encoded key starts in `source`, and its length.
 * @returns Whether a shape was compiled.
 */
export function learnShape(
  keys: string[],
  source: Uint8Array,
  ranges: readonly number[],
): boolean {
  if (!canCompile || shapesCompiled >= MAX_SHAPES_COMPILED) return false;
  if (!sighted(keys)) return false;
  return compile(keys, source, ranges);
}

/** Counts an object's key sequence; whether it is now worth compiling. */
function sighted(keys: string[]): boolean {
  const first = keys[0]!;
  const candidate = candidates.get(first);
  if (candidate === undefined || !sameKeys(candidate.keys, keys)) {
    if (candidates.size >= MAX_CANDIDATES) candidates.clear();
    candidates.set(first, { keys, seen: 1 });
    return false;
  }
  if (++candidate.seen < SIGHTINGS_TO_COMPILE) return false;
  candidates.delete(first);
  return true;
}

function sameKeys(a: string[], b: string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Compiles and stores the shape of these keys, if they can make one. */
function compile(
  keys: string[],
  source: Uint8Array,
  ranges: readonly number[],
): boolean {
  const seen = new Set<string>();
  for (const key of keys) {
    if (!SHAPE_KEY.test(key) || key === "__proto__" || seen.has(key)) {
      return false;
    }
    seen.add(key);
  }
  let total = 0;
  for (let i = 1; i < ranges.length; i += 2) total += ranges[i]!;
  const bytes = new Uint8Array(total);
  const starts = new Int32Array(keys.length + 1);
  let offset = 0;
  for (let i = 0; i < keys.length; i++) {
    const from = ranges[2 * i]!;
    const length = ranges[2 * i + 1]!;
    starts[i] = offset;
    bytes.set(source.subarray(from, from + length), offset);
    offset += length;
  }
  starts[keys.length] = offset;
  let build: Shape["build"];
  try {
    // Safe to compile: every key is an identifier (checked above), so the
    // text is exactly an object literal of these keys.
    build = new Function(
      "s",
      "b",
      `return {${keys.map((key, i) => `${key}: s[b + ${i}]`).join(", ")}};`,
    ) as Shape["build"];
  } catch {
    canCompile = false;
    return false;
  }
  shapesCompiled++;
  if (shapes.size >= MAX_SHAPES) shapes.clear();
  shapes.set(keys[0]!, { keys, bytes, starts, build });
  return true;
}
