/**
 * The API key format: generation, the cheap well-formedness check and hashing.
 *
 * A key is `isk_` + 30 base62 characters of randomness (178 bits) + 6 base62
 * characters of CRC32 over the first 34 characters, 40 characters in all.
 * The fixed prefix lets secret scanners recognise a leaked key; the checksum
 * lets the server refuse a mistyped or invented key without touching the store.
 *
 * @module
 */

import { sha256Hex } from "./_sha256.ts";

/** The fixed prefix of every key, for secret scanners. */
export const KEY_PREFIX = "isk_";
/** The length of every key, in characters. */
export const KEY_LENGTH = 40;

const BODY_LENGTH = 30;
const CHECKSUM_LENGTH = 6;
const ALPHABET =
  "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/** Matches exactly the key format; exported so URL scanning uses the same rule. */
export const KEY_PATTERN = /isk_[0-9A-Za-z]{36}/;
const WHOLE_KEY = new RegExp(`^${KEY_PATTERN.source}$`);

/** A freshly generated key with what may be stored about it. */
export interface NewApiKey {
  /** The secret; show it once and drop it. */
  key: string;
  /** SHA-256 of the key, hex: the only form the store keeps. */
  hash: string;
  /** A non-secret reminder of which key this is: prefix and last four characters. */
  hint: string;
}

/** Generates a new key from the platform CSPRNG. */
export function generateApiKey(): NewApiKey {
  const body = randomBase62(BODY_LENGTH);
  const key = KEY_PREFIX + body + checksum(KEY_PREFIX + body);
  return { key, hash: hashApiKey(key), hint: keyHint(key) };
}

/**
 * True when the value has the prefix, length, alphabet and checksum of a key.
 * Synchronous and allocation-light: it runs before any hashing or store read.
 */
export function isWellFormedApiKey(value: string): boolean {
  if (value.length !== KEY_LENGTH || !WHOLE_KEY.test(value)) return false;
  const payload = value.slice(0, KEY_LENGTH - CHECKSUM_LENGTH);
  return checksum(payload) === value.slice(KEY_LENGTH - CHECKSUM_LENGTH);
}

const PREFIXED = /isk_[0-9A-Za-z]{8}/i;
const BODY_RUN = /[0-9A-Za-z]{36,}/g;
/**
 * A run of exactly a key's body length, between characters a key has not,
 * and not after the prefix (that is a whole key, which KEY_PATTERN finds).
 */
const BARE_BODY = /(?<![0-9A-Za-z])(?<!isk_)[0-9A-Za-z]{36}(?![0-9A-Za-z])/g;

/**
 * The keys in `text` written without their prefix: each run of exactly 36
 * key characters that, prefixed, is a well-formed key (the checksum is
 * public, so the body alone is the key), given back whole. One checksum per
 * run, so a long hostile text costs linear time; a body glued to other
 * letters or digits is for {@linkcode looksLikeApiKey}, not this.
 */
export function unprefixedKeysIn(text: string): string[] {
  const keys: string[] = [];
  for (const [body] of text.matchAll(BARE_BODY)) {
    const key = KEY_PREFIX + body;
    if (isWellFormedApiKey(key)) keys.push(key);
  }
  return keys;
}

/**
 * True when the text holds what may be a key or most of one: the prefix
 * (in any case) and 8 key characters, or 36 characters that with the prefix
 * make a well-formed key (the checksum is public, so a key without its
 * prefix is still recognisable). For text that must never be echoed.
 */
export function looksLikeApiKey(text: string): boolean {
  if (PREFIXED.test(text)) return true;
  for (const run of text.match(BODY_RUN) ?? []) {
    for (let i = 0; i + 36 <= run.length; i++) {
      if (isWellFormedApiKey(KEY_PREFIX + run.slice(i, i + 36))) return true;
    }
  }
  return false;
}

/**
 * SHA-256 of the key, hex.
 *
 * A fast hash is enough: keys carry 178 random bits, so there is no dictionary
 * to slow down. Synchronous, unlike crypto.subtle (./_sha256.ts says why).
 */
export function hashApiKey(key: string): string {
  return sha256Hex(key);
}

/** `isk_…` and the key's last four characters: enough to recognise, useless to guess. */
export function keyHint(key: string): string {
  return `${KEY_PREFIX}…${key.slice(-4)}`;
}

function checksum(payload: string): string {
  return toBase62(crc32Ascii(payload), CHECKSUM_LENGTH);
}

/** CRC-32 (IEEE, zlib's) lookup table, one entry per byte value. */
const CRC_TABLE = (() => {
  const table = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c;
  }
  return table;
})();

/**
 * zlib's CRC-32 of an ASCII string (every caller has matched the key
 * alphabet first), unsigned. In JavaScript rather than node:zlib's: a call
 * into the runtime for 34 bytes cost more than the sum itself, on every
 * request that carries a key.
 */
function crc32Ascii(text: string): number {
  let c = -1;
  for (let i = 0; i < text.length; i++) {
    c = CRC_TABLE[(c ^ text.charCodeAt(i)) & 0xff] ^ (c >>> 8);
  }
  return (c ^ -1) >>> 0;
}

function toBase62(value: number, width: number): string {
  let out = "";
  for (let i = 0; i < width; i++) {
    out = ALPHABET[value % 62] + out;
    value = Math.floor(value / 62);
  }
  return out;
}

function randomBase62(length: number): string {
  let out = "";
  while (out.length < length) {
    for (const byte of crypto.getRandomValues(new Uint8Array(length * 2))) {
      // 248 = 4 * 62: bytes above it are dropped so every character is equally likely.
      if (byte < 248 && out.length < length) out += ALPHABET[byte % 62];
    }
  }
  return out;
}
