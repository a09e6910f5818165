/**
 * Entry keys as bytes whose order is the keys' order, so that PostgreSQL's
 * `bytea` index lists entries as Deno KV does: each part a type tag, then
 * a string's UTF-8 (NUL escaped, NUL-terminated, so no part is a prefix of
 * another), a number's IEEE-754 bits with the sign flipped (negatives
 * inverted), or a bigint's length and magnitude (negatives inverted).
 * Parts of one type compare by value; across types, strings come before
 * bigints, and bigints before numbers, as in Deno KV, where -0 is also a
 * part of its own just below 0. NaN, which Deno KV takes, is refused: no
 * key the layout writes holds one, and a NaN is equal to nothing.
 * @module
 */

import type { EntryKey, KeyPart } from "../entries.ts";

const STRING = 0x02;
const NEGATIVE_BIGINT = 0x10;
const BIGINT = 0x12;
const NUMBER = 0x21;

const utf8 = new TextEncoder();
const text = new TextDecoder("utf-8", { fatal: true });

/** The bytes of `key`; throws a `TypeError` for a part no key may hold. */
export function encodeKey(key: EntryKey): Uint8Array {
  const bytes: number[] = [];
  for (const part of key) encodePart(part, bytes);
  return new Uint8Array(bytes);
}

function encodePart(part: KeyPart, bytes: number[]): void {
  if (typeof part === "string") {
    bytes.push(STRING);
    for (const byte of utf8.encode(part)) {
      bytes.push(byte);
      if (byte === 0) bytes.push(0xff);
    }
    bytes.push(0);
  } else if (typeof part === "number") {
    if (Number.isNaN(part)) throw new TypeError("A key part cannot be NaN");
    const view = new DataView(new ArrayBuffer(8));
    // -0 keeps its sign bit, so it stays apart from 0 as Deno KV keeps it.
    view.setFloat64(0, part);
    const negative = view.getUint8(0) & 0x80;
    bytes.push(NUMBER);
    for (let i = 0; i < 8; i++) {
      const byte = view.getUint8(i);
      bytes.push(negative ? ~byte & 0xff : i === 0 ? byte | 0x80 : byte);
    }
  } else if (typeof part === "bigint") {
    const negative = part < 0n;
    let hex = (negative ? -part : part).toString(16);
    if (hex.length % 2) hex = `0${hex}`;
    const length = hex.length / 2;
    if (length > 255) throw new TypeError("A key part's bigint is too large");
    const flip = (byte: number) => negative ? ~byte & 0xff : byte;
    bytes.push(negative ? NEGATIVE_BIGINT : BIGINT, flip(length));
    for (let i = 0; i < length; i++) {
      bytes.push(flip(parseInt(hex.slice(2 * i, 2 * i + 2), 16)));
    }
  } else {
    throw new TypeError(`A key part cannot be a ${typeof part}`);
  }
}

/** The key whose bytes are `bytes`, as {@linkcode encodeKey} wrote them. */
export function decodeKey(bytes: Uint8Array): EntryKey {
  const key: KeyPart[] = [];
  let at = 0;
  while (at < bytes.length) {
    const tag = bytes[at++];
    if (tag === STRING) {
      const out: number[] = [];
      for (; bytes[at] !== 0 || bytes[at + 1] === 0xff; at++) {
        out.push(bytes[at]);
        if (bytes[at] === 0) at++;
      }
      at++;
      key.push(text.decode(new Uint8Array(out)));
    } else if (tag === NUMBER) {
      const view = new DataView(new ArrayBuffer(8));
      const negative = !(bytes[at] & 0x80);
      for (let i = 0; i < 8; i++) {
        const byte = bytes[at + i];
        view.setUint8(
          i,
          negative ? ~byte & 0xff : i === 0 ? byte & 0x7f : byte,
        );
      }
      key.push(view.getFloat64(0));
      at += 8;
    } else if (tag === BIGINT || tag === NEGATIVE_BIGINT) {
      const negative = tag === NEGATIVE_BIGINT;
      const flip = (byte: number) => negative ? ~byte & 0xff : byte;
      const length = flip(bytes[at++]);
      let magnitude = 0n;
      for (let i = 0; i < length; i++) {
        magnitude = (magnitude << 8n) | BigInt(flip(bytes[at++]));
      }
      key.push(negative ? -magnitude : magnitude);
    } else {
      throw new TypeError(`Not a key's bytes: tag ${tag} at ${at - 1}`);
    }
  }
  return key;
}

/**
 * Bytes bounding every key strictly longer than `prefix` that starts with it:
 * its bytes, and them plus 0xff (no tag).
 */
export function prefixBounds(
  prefix: EntryKey,
): { after: Uint8Array; before: Uint8Array } {
  const after = encodeKey(prefix);
  const before = new Uint8Array(after.length + 1);
  before.set(after);
  before[after.length] = 0xff;
  return { after, before };
}

/** Compares two keys' bytes as PostgreSQL orders `bytea`: < 0, 0 or > 0. */
export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}
