import assert from "node:assert/strict";
import fc from "fast-check";
import {
  generateApiKey,
  hashApiKey,
  isWellFormedApiKey,
  KEY_LENGTH,
  KEY_PREFIX,
} from "../../lib/auth/api_key.ts";

Deno.test("generateApiKey() makes isk_ keys of 40 base62 characters that pass their own check", () => {
  for (let i = 0; i < 200; i++) {
    const { key } = generateApiKey();
    assert.equal(key.length, KEY_LENGTH);
    assert.ok(key.startsWith(KEY_PREFIX));
    assert.match(key.slice(4), /^[0-9A-Za-z]+$/);
    assert.ok(isWellFormedApiKey(key), key.slice(0, 8));
  }
});

Deno.test("generateApiKey() never repeats and spreads over the whole alphabet", () => {
  const keys = new Set<string>();
  const seen = new Set<string>();
  for (let i = 0; i < 2000; i++) {
    const { key } = generateApiKey();
    keys.add(key);
    for (const c of key.slice(4, 34)) seen.add(c);
  }
  assert.equal(keys.size, 2000);
  assert.equal(seen.size, 62);
});

Deno.test("generateApiKey() returns the SHA-256 of the key and a hint of its last four characters", async () => {
  const { key, hash, hint } = generateApiKey();
  const expected = Array.from(
    new Uint8Array(
      await crypto.subtle.digest("SHA-256", new TextEncoder().encode(key)),
    ),
    (b) => b.toString(16).padStart(2, "0"),
  ).join("");
  assert.equal(hash, expected);
  assert.equal(hashApiKey(key), expected);
  assert.equal(hint, `isk_…${key.slice(-4)}`);
  assert.ok(!hint.includes(key.slice(4, 30)));
});

Deno.test("isWellFormedApiKey() refuses a wrong prefix, length, alphabet or checksum", () => {
  const { key } = generateApiKey();
  const swap = (i: number) =>
    key.slice(0, i) + (key[i] === "a" ? "b" : "a") + key.slice(i + 1);
  const cases: Record<string, string> = {
    "empty": "",
    "wrong prefix": "ghp_" + key.slice(4),
    "upper-case prefix": "ISK_" + key.slice(4),
    "one character short": key.slice(0, -1),
    "one character long": key + "a",
    "a character outside base62": key.slice(0, 10) + "-" + key.slice(11),
    "a changed body character": swap(10),
    "a changed checksum character": swap(38),
    "surrounding space": ` ${key}`,
    "two keys folded": `${key}, ${key}`,
    "non-ASCII": key.slice(0, 39) + "é",
  };
  for (const [label, value] of Object.entries(cases)) {
    assert.equal(isWellFormedApiKey(value), false, label);
  }
});

Deno.test("the checksum is zlib's CRC-32, as every key issued so far carries it", async () => {
  const { crc32 } = await import("node:zlib");
  const alphabet =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  const base62 = (value: number) => {
    let out = "";
    for (let i = 0; i < 6; i++) {
      out = alphabet[value % 62] + out;
      value = Math.floor(value / 62);
    }
    return out;
  };
  for (let i = 0; i < 500; i++) {
    const { key } = generateApiKey();
    const payload = key.slice(0, 34);
    assert.equal(key.slice(34), base62(crc32(payload)));
  }
});

Deno.test("hashApiKey is SHA-256 of the text's UTF-8, as crypto.subtle computes it, for keys and any other text", async () => {
  const subtleHex = async (text: string) =>
    Array.from(
      new Uint8Array(
        await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)),
      ),
      (byte) => byte.toString(16).padStart(2, "0"),
    ).join("");
  await fc.assert(
    fc.asyncProperty(
      fc.oneof(
        // A key's shape (not a real key: a failure prints its input).
        fc.stringMatching(/^isk_[0-9A-Za-z]{36}$/),
        fc.string({ unit: "grapheme", maxLength: 200 }),
        fc.string({ unit: "binary", maxLength: 70 }),
        // Around the one-block boundary (55 bytes) and the two-block one.
        fc.integer({ min: 50, max: 130 }).map((n) => "a".repeat(n)),
      ),
      async (text) => {
        assert.equal(hashApiKey(text), await subtleHex(text));
      },
    ),
    { numRuns: 500 },
  );
});
