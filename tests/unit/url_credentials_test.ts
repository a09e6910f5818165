/**
 * Credentials in URLs (lib/http/url_credentials.ts) on their own: a key in
 * the path or the query is found in every spelling a client or an attacker
 * may use, and a path that goes to the log never carries one.
 */

import assert from "node:assert/strict";
import { decodeAsciiEscapes } from "../../lib/util/ascii_escapes.ts";
import { generateApiKey, KEY_PATTERN } from "../../lib/auth/api_key.ts";
import {
  keysInUrl,
  loggablePath,
  urlCarriesCredential,
} from "../../lib/http/url_credentials.ts";

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

Deno.test("loggablePath withholds a path with a key in any spelling, and never returns a key", () => {
  for (const [spelling, key] of Object.entries(SPELLINGS)) {
    for (const path of [`/${key}`, `${ROUTE}/${key}`]) {
      const logged = loggablePath(path);
      assert.ok(!KEY_PATTERN.test(decodeAsciiEscapes(logged)), spelling);
      assert.ok(!logged.includes(KEY.slice(4, 20)), spelling);
      assert.equal(logged, "[redacted: a key in the path]", spelling);
    }
  }
  const deep = `/isk${escapeAgain("%5F", 12)}abc`;
  assert.equal(loggablePath(deep), "[redacted: a key in the path]");
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
    ]
  ) {
    const logged = loggablePath(path);
    assert.ok(!logged.includes(KEY.slice(4, 12)), path.length.toString());
    assert.match(logged, /^\[redacted: /);
  }
});

Deno.test("loggablePath leaves a path without a key as it was sent", () => {
  for (
    const path of [ROUTE, "/", "/%2e%2e/etc", "/caf%C3%A9", "/isk_short"]
  ) {
    assert.equal(loggablePath(path, { routes: new Set([ROUTE]) }), path);
  }
});

Deno.test("loggablePath withholds a key split across path segments shorter than 16 characters", () => {
  const split = (size: number, separator: string) =>
    "/" + KEY.match(new RegExp(`.{1,${size}}`, "g"))!.join(separator);
  for (
    const path of [
      split(15, "/"),
      split(8, "/"),
      split(4, "/"),
      split(1, "/"),
      split(6, ";"),
      split(5, "."),
      split(8, "%2F"),
      `/${KEY.slice(4, 12)}/${KEY.slice(12, 20)}`, // 16 characters of it
      `${ROUTE}/${KEY.slice(4, 12)}/${KEY.slice(12, 20)}`,
    ]
  ) {
    const logged = loggablePath(path, { routes: new Set([ROUTE]) });
    assert.match(logged, /^\[redacted: /, path.length.toString());
    assert.ok(!logged.includes(KEY.slice(4, 8)));
  }
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
    assert.ok(!loggablePath(path).includes(body), where);
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
