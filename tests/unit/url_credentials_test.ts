/**
 * Credentials in URLs (lib/http/url_credentials.ts) on their own: a key in
 * the path or the query is found in every spelling a client or an attacker
 * may use, and a path that goes to the log never carries one.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { decodeAsciiEscapes } from "../../lib/util/ascii_escapes.ts";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import {
  keysInUrl,
  urlCarriesCredential,
} from "../../lib/http/url_credentials.ts";
import { loggablePath } from "../../lib/http/loggable_path.ts";

const KEY = generateApiKey().key;
const ROUTE = "/api/v1/integration/connection";

/** Every ASCII character of `text` as %XX. */
const escapeAll = (text: string) =>
  [...text].map((c) =>
    `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`
  ).join("");

/** `text` with each % escaped again, `times` over. */
function escapeAgain(text: string, times: number): string {
  let out = text;
  for (let i = 0; i < times; i++) out = out.replaceAll("%", "%25");
  return out;
}

/** The spellings of the key a URL may carry, by name. */
const SPELLINGS: Record<string, string> = {
  plain: KEY,
  "underscore escaped": KEY.replace("_", "%5F"),
  "underscore escaped, lower case": KEY.replace("_", "%5f"),
  "every character escaped": escapeAll(KEY),
  "escaped twice": escapeAgain(KEY.replace("_", "%5F"), 1),
  "escaped seven times": escapeAgain(KEY.replace("_", "%5F"), 6),
  "broken escapes before it": `%zz%FF%E2%82${KEY.replace("_", "%5F")}`,
  "broken escape after it": `${escapeAll(KEY)}%G1%`,
};

Deno.test("a key in the path is found in every spelling", () => {
  for (const [spelling, key] of Object.entries(SPELLINGS)) {
    for (const path of [`/${key}`, `${ROUTE}/${key}`, `/x/${key}/y`]) {
      assert.ok(urlCarriesCredential(path, ""), `${spelling}: ${path}`);
    }
  }
});

Deno.test("a key in a query value or name is found in every spelling", () => {
  for (const [spelling, key] of Object.entries(SPELLINGS)) {
    for (const query of [`q=${key}`, `a=1&b=${key}`, `${key}=1`, `${key}`]) {
      assert.ok(urlCarriesCredential(ROUTE, query), `${spelling}: ${query}`);
    }
  }
});

Deno.test("a query parameter named like a credential is refused whatever it holds", () => {
  for (
    const name of [
      "api_key",
      "apikey",
      "API-KEY",
      "apiKey",
      "x-api-key",
      "X_API_KEY",
      "key",
      "token",
      "access_token",
      "accessToken",
    ]
  ) {
    assert.ok(urlCarriesCredential(ROUTE, `${name}=x`), name);
    assert.ok(urlCarriesCredential(ROUTE, `page=2&${name}=`), name);
  }
});

Deno.test("a path escaped deeper than decoding goes is refused, as it may hide a key", () => {
  const deep = escapeAgain("%5F", 12);
  assert.ok(urlCarriesCredential(`/isk${deep}abc`, ""));
  assert.ok(urlCarriesCredential(`/${escapeAgain(escapeAll("isk_"), 12)}`, ""));
  assert.ok(urlCarriesCredential(ROUTE, `q=${deep}`));
});

Deno.test("ordinary paths and queries carry no credential", () => {
  for (
    const [path, query] of [
      [ROUTE, ""],
      ["/", ""],
      ["/api/v1/health/live", ""],
      [ROUTE, "page=2&sort=name"],
      ["/caf%C3%A9/%20space", ""],
      ["/isk_tooShort", ""],
      ["/100%", ""],
      [ROUTE, "monkey=1&keys=2&tokens=3"],
      [ROUTE, "q=isk_%20not+a+key"],
    ]
  ) {
    assert.ok(!urlCarriesCredential(path, query), `${path}?${query}`);
  }
});

Deno.test("keysInUrl gives back the key decoded from every spelling, in the path and the query", () => {
  for (const [spelling, key] of Object.entries(SPELLINGS)) {
    assert.deepEqual(keysInUrl(`/${key}`, "", { most: 4 }), [KEY], spelling);
    assert.deepEqual(
      keysInUrl(ROUTE, `q=${key}`, { most: 4 }),
      [KEY],
      spelling,
    );
  }
});

Deno.test("keysInUrl gives back the keys of path and query together, at most as many as asked", () => {
  const other = generateApiKey().key;
  assert.deepEqual(
    keysInUrl(`/${escapeAll(KEY)}`, `k=${other.replace("_", "%255F")}`, {
      most: 4,
    }),
    [KEY, other],
  );
  assert.deepEqual(keysInUrl(`/${KEY}/${KEY}/${KEY}`, "", { most: 2 }), [
    KEY,
    KEY,
  ]);
  assert.deepEqual(keysInUrl(ROUTE, "api_key=nothing", { most: 4 }), []);
});

/** Letters and digits a key is written in. */
const ALPHABET =
  "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const ROUTES = new Set([
  ROUTE,
  "/api/v1/health/live",
  "/api/v1/health/ready",
]);

/**
 * What no logged path may hold of a key: `isk_` in any case, or 8
 * characters of its body in a row, as logged, decoded, or with what parts
 * the pieces taken out (each `[key-shaped]` still parts them).
 */
function assertNoKeyPart(logged: string, key: string, sent: string): void {
  const body = key.slice("isk_".length);
  const decoded = decodeAsciiEscapes(logged);
  const joined = decoded.split("[key-shaped]").map((piece) =>
    piece.replace(/[^0-9A-Za-z]/g, "")
  );
  for (const text of [logged, decoded, ...joined]) {
    assert.ok(!/isk_/i.test(text), `isk_ survives in ${logged} (${sent})`);
    for (let i = 0; i + 8 <= body.length; i++) {
      assert.ok(
        !text.includes(body.slice(i, i + 8)),
        `${body.slice(i, i + 8)} of ${key} survives in ${logged}, from ${sent}`,
      );
    }
  }
}

Deno.test("loggablePath keeps a mistyped path whole, and withholds only the part of a path shaped like a key", () => {
  for (
    const path of [
      "/api/v1/integration/conection",
      "/api/v1/integrationn/connection",
      "/api/v1/intgration/conection/",
      "/api/v2/health/live",
      "/API/V1/Integration/Connection",
      "/api/v1/integration/CONECTION",
      "/api/v1/connections/12345",
      "/.well-known/security.txt",
      "/wp-admin/admin-ajax.php",
    ]
  ) {
    assert.equal(loggablePath(path, { routes: ROUTES }), path);
  }
  const body = KEY.slice(4);
  for (
    const [path, logged] of [
      [`/api/v1/${KEY}/x`, "/api/v1/[key-shaped]/x"],
      [`${ROUTE}/${KEY}`, `${ROUTE}/[key-shaped]`],
      [`/api/v1/${body}`, "/api/v1/[key-shaped]"],
      [`/x/isk_${body.slice(0, 3)}/${body.slice(3)}/y`, "/x/[key-shaped]/y"],
      [`/api/v1/isk_short`, "/api/v1/[key-shaped]"],
      [`/api/${escapeAll(KEY)}.json`, "/api/[key-shaped].json"],
    ]
  ) {
    assert.equal(loggablePath(path, { routes: ROUTES }), logged);
  }
});

Deno.test("loggablePath withholds a key in any spelling, and never returns a part of one", () => {
  for (const [spelling, key] of Object.entries(SPELLINGS)) {
    for (const path of [`/${key}`, `${ROUTE}/${key}`, `/x/${key}/y`]) {
      const logged = loggablePath(path, { routes: ROUTES });
      assertNoKeyPart(logged, KEY, spelling);
      assert.ok(logged.includes("[key-shaped]"), spelling);
    }
  }
  const deep = `/isk${escapeAgain("%5F", 12)}abc`;
  assert.equal(loggablePath(deep), "/[key-shaped]");
});

Deno.test("loggablePath withholds a key cut short, without its prefix, in upper case or split across segments", () => {
  for (
    const path of [
      `/${KEY.slice(0, 39)}`,
      `/${KEY.slice(4)}`,
      `/ISK_${KEY.slice(4)}`,
      `/${KEY.slice(0, 20)}/${KEY.slice(20)}`,
      `/${KEY.slice(0, 20)}%2F${KEY.slice(20)}`,
      `/${KEY.slice(0, 20)}%00${KEY.slice(20)}`,
      `/${escapeAll(KEY.slice(4, 24))}`,
      `/${KEY.slice(4, 12)}/${KEY.slice(12, 20)}`, // 16 characters of it
      `${ROUTE}/${KEY.slice(4, 12)}/${KEY.slice(12, 20)}`,
    ]
  ) {
    assertNoKeyPart(loggablePath(path, { routes: ROUTES }), KEY, path);
  }
});

Deno.test("loggablePath withholds a key split into pieces of any size by any separator", () => {
  const split = (size: number, separator: string) =>
    "/" + KEY.match(new RegExp(`.{1,${size}}`, "g"))!.join(separator);
  for (const size of [1, 2, 3, 4, 5, 6, 7, 8, 12, 15]) {
    for (
      const separator of ["/", ".", "-", "_", "~", ";", "%2F", "%2f", "/./"]
    ) {
      const path = split(size, separator);
      assertNoKeyPart(loggablePath(path, { routes: ROUTES }), KEY, path);
    }
  }
});

/** `character` as %XX, then escaped again `layers - 1` times, its hex digits in the case asked. */
function escaped(character: string, layers: number, lower: boolean): string {
  const hex = character.charCodeAt(0).toString(16).padStart(2, "0");
  let out = `%${lower ? hex.toLowerCase() : hex.toUpperCase()}`;
  for (let i = 1; i < layers; i++) out = out.replaceAll("%", "%25");
  return out;
}

/** Any key: 36 letters and digits drawn evenly, as the generator draws them. */
const anyKeyBody = fc.noBias(
  fc.array(fc.integer({ min: 0, max: 61 }), {
    minLength: 36,
    maxLength: 36,
  }),
).map((digits) => digits.map((d) => ALPHABET[d]).join(""));

/** Text between or around the pieces: no letters or digits. */
const separator = fc.oneof(
  fc.constantFrom("/", ".", "-", "_", "~", ";", ",", "%2F", "%2f", "/./", "+"),
  fc.string({
    unit: fc.constantFrom(..."/.-_~!$&'()*+,;=:@ é€%"),
    minLength: 1,
    maxLength: 4,
  }),
);

const surrounding = fc.oneof(
  fc.constant(""),
  fc.constant(`${ROUTE}/`),
  fc.webPath().map((path) => `${path}/`),
  fc.stringMatching(/^(\/[a-z0-9]{1,12}){1,3}\/?$/),
);

Deno.test("property: however a key is embedded, split, spread or escaped, no part of it is logged", () => {
  fc.assert(
    fc.property(
      anyKeyBody,
      fc.constantFrom("isk_", "ISK_", "Isk_", ""),
      fc.uniqueArray(fc.integer({ min: 1, max: 39 }), { maxLength: 39 }),
      fc.array(separator, { minLength: 39, maxLength: 39 }),
      fc.array(
        fc.record({
          layers: fc.constantFrom(0, 0, 0, 1, 1, 2, 3, 8, 9),
          lower: fc.boolean(),
          every: fc.constantFrom(1, 1, 2, 3),
        }),
        { minLength: 40, maxLength: 40 },
      ),
      surrounding,
      surrounding,
      (body, prefix, cuts, separators, encodings, before, after) => {
        const key = prefix + body;
        const ends = [...new Set([...cuts.filter((cut) => cut < key.length)])]
          .sort((a, b) => a - b);
        const pieces = [...ends, key.length].map((end, i, all) =>
          key.slice(i === 0 ? 0 : all[i - 1], end)
        );
        const embedded = pieces.map((piece, i) => {
          const { layers, lower, every } = encodings[i];
          const written = layers === 0
            ? piece
            : [...piece].map((c, j) =>
              j % every === 0 ? escaped(c, layers, lower) : c
            ).join("");
          return (i === 0 ? "" : separators[i]) + written;
        }).join("");
        const path = `/${before.replace(/^\//, "")}${embedded}${after}`;
        const logged = loggablePath(path, { routes: ROUTES });
        assertNoKeyPart(logged, `isk_${body}`, path);
        // What is not the key stays: the route before it, here.
        if (before === `${ROUTE}/`) {
          assert.ok(logged.startsWith(before), logged);
        }
      },
    ),
    { numRuns: 2000 },
  );
});

Deno.test("property: a path of words and digits shorter than 16 is logged as it was sent", () => {
  const word = fc.oneof(
    fc.stringMatching(/^[a-z]{1,15}$/),
    fc.stringMatching(/^[0-9]{1,15}$/),
    fc.stringMatching(/^[a-z]{1,8}[0-9]{1,6}$/),
    fc.constantFrom(
      "api",
      "v1",
      "integration",
      "integrationn",
      "intgration",
      "conection",
      "connections",
      "health",
      "helth",
      "Integration",
      "CONNECTION",
      "API",
    ),
  );
  fc.assert(
    fc.property(
      fc.array(
        fc.tuple(fc.constantFrom("/", "/", "-", ".", "~", "_"), word),
        { minLength: 1, maxLength: 12 },
      ),
      fc.boolean(),
      (parts, slash) => {
        const path = `/${
          parts.map(([s, w], i) => (i === 0 ? "" : s) + w).join("")
        }${slash ? "/" : ""}`;
        // `disk_usage` holds the prefix: withheld, rightly.
        fc.pre(!/isk_/i.test(path));
        assert.equal(loggablePath(path, { routes: ROUTES }), path);
      },
    ),
    { numRuns: 1000 },
  );
});

Deno.test("a key without its prefix is found in the path, a query value or a query name, and given back whole", () => {
  const body = KEY.slice("isk_".length);
  for (
    const [path, query] of [
      [`/${body}`, ""],
      [`/api/v1/health/live/${body}`, ""],
      ["/x", body],
      [ROUTE, `q=${body}`],
      [ROUTE, `${escapeAll(body)}=1`],
      [`/ISK_${body}`, ""],
    ]
  ) {
    const where = `${path}?${query}`.replace(body, "<body>");
    assert.ok(urlCarriesCredential(path, query), where);
    assert.deepEqual(keysInUrl(path, query, { most: 4 }), [KEY], where);
    assertNoKeyPart(loggablePath(path), KEY, where);
  }
});

Deno.test("a run of a key body's length whose checksum does not match is no key", () => {
  const body = KEY.slice("isk_".length);
  // The same characters with the checksum's last one changed.
  const last = body.at(-1) === "A" ? "B" : "A";
  const notKey = body.slice(0, -1) + last;
  assert.ok(!urlCarriesCredential(`/${notKey}`, ""));
  assert.ok(!urlCarriesCredential(ROUTE, `q=${notKey}`));
  assert.deepEqual(keysInUrl(`/${notKey}`, "", { most: 4 }), []);
});
