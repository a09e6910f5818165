/**
 * A key is `isk_` + 30 base62 characters of randomness (178 bits) + 6 of
 * CRC32 over the first 34: the prefix lets secret scanners recognise a
 * leaked key, the checksum lets the server refuse a mistyped one unread.
 *
 * @module
 */

import { sha256Hex } from "./_sha256.ts";

export const KEY_PREFIX = "isk_";
export const KEY_LENGTH = 40;

const BODY_LENGTH = 30;
const CHECKSUM_LENGTH = 6;
const ALPHABET =
  "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/** Exported so URL scanning uses the same rule. */
export const KEY_PATTERN = /isk_[0-9A-Za-z]{36}/;
const WHOLE_KEY = new RegExp(`^${KEY_PATTERN.source}$`);

/** A new key; the store keeps only its hash and hint. */
export interface NewApiKey {
  key: string;
  hash: string;
  hint: string;
}

/** From the platform CSPRNG. */
export function generateApiKey(): NewApiKey {
  const body = randomBase62(BODY_LENGTH);
  const key = KEY_PREFIX + body + checksum(KEY_PREFIX + body);
  return { key, hash: hashApiKey(key), hint: keyHint(key) };
}

/** Prefix, length, alphabet and checksum; allocation-light, as it runs before any hashing. */
export function isWellFormedApiKey(value: string): boolean {
  if (value.length !== KEY_LENGTH || !WHOLE_KEY.test(value)) return false;
  const payload = value.slice(0, KEY_LENGTH - CHECKSUM_LENGTH);
  return checksum(payload) === value.slice(KEY_LENGTH - CHECKSUM_LENGTH);
}

const PREFIXED = /isk_[0-9A-Za-z]{8}/i;
const BODY_RUN = /[0-9A-Za-z]{36,}/g;
/** A key body's length between non-key characters, not after the prefix (KEY_PATTERN's case). */
const BARE_BODY = /(?<![0-9A-Za-z])(?<!isk_)[0-9A-Za-z]{36}(?![0-9A-Za-z])/g;

/**
 * Keys written without their prefix (the body alone is the key), given back
 * whole; one checksum per run, so a long hostile text costs linear time.
 */
export function unprefixedKeysIn(text: string): string[] {
  const keys: string[] = [];
  for (const [body] of text.matchAll(BARE_BODY)) {
    const key = KEY_PREFIX + body;
    if (isWellFormedApiKey(key)) keys.push(key);
  }
  return keys;
}

/** The prefix in any case and 8 key characters, or a key without its prefix: never to be echoed. */
export function looksLikeApiKey(text: string): boolean {
  if (PREFIXED.test(text)) return true;
  for (const run of text.match(BODY_RUN) ?? []) {
    for (let i = 0; i + 36 <= run.length; i++) {
      if (isWellFormedApiKey(KEY_PREFIX + run.slice(i, i + 36))) return true;
    }
  }
  return false;
}

/** A fast hash is enough: 178 random bits leave no dictionary to slow down. */
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

const CRC_TABLE = (() => {
  const table = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c;
  }
  return table;
})();

/** zlib's CRC-32 of ASCII; not node:zlib's, whose call cost more than the sum for 34 bytes. */
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
