/**
 * openapi.json's `RateLimit-Policy` and `RateLimit` say what the service
 * writes (lib/http/rate_limit_headers.ts): a key's one policy, and a
 * rotation line key's two with the binding one named, each matching the
 * documented pattern; and the examples the document gives match it too.
 */

import assert from "node:assert/strict";
import { rateLimitHeaders } from "../../lib/http/rate_limit_headers.ts";
import { lineLimit } from "../../lib/auth/rate_limit.ts";
import { OPENAPI_FILE } from "../../scripts/contract.ts";

type Header = { schema: { pattern: string; examples: string[] } };

const headers: Record<string, Header> = JSON.parse(
  Deno.readTextFileSync(OPENAPI_FILE),
).components.headers;
const pattern = (name: string) => new RegExp(headers[name].schema.pattern);

const LIMIT = { count: 600, windowSeconds: 60 };
const DECISION = { remaining: 540, resetSeconds: 42 };

Deno.test("a key never rotated: one policy, as the contract writes it, byte for byte as 1.1 did", () => {
  const written = Object.fromEntries(rateLimitHeaders(LIMIT, DECISION));
  assert.deepEqual(written, {
    "RateLimit-Policy": '"key";q=600;w=60',
    "RateLimit": '"key";r=540;t=42',
  });
  assert.match(written["RateLimit-Policy"], pattern("RateLimitPolicy"));
  assert.match(written["RateLimit"], pattern("RateLimit"));
});

Deno.test("a key of a rotation line: both policies, and RateLimit names the binding one, each matching the contract", () => {
  for (const binds of [false, true]) {
    const written = Object.fromEntries(
      rateLimitHeaders(LIMIT, DECISION, {
        line: { limit: lineLimit(LIMIT), binds },
      }),
    );
    assert.equal(
      written["RateLimit-Policy"],
      '"key";q=600;w=60, "line";q=1200;w=60',
    );
    assert.equal(
      written["RateLimit"],
      `"${binds ? "line" : "key"}";r=540;t=42`,
    );
    assert.match(written["RateLimit-Policy"], pattern("RateLimitPolicy"));
    assert.match(written["RateLimit"], pattern("RateLimit"));
  }
});

Deno.test("the contract's examples match its own patterns", () => {
  for (const name of ["RateLimitPolicy", "RateLimit"]) {
    for (const example of headers[name].schema.examples) {
      assert.match(example, pattern(name));
    }
  }
});

Deno.test("RateLimit's t never exceeds the window of the policy it names, whatever reset the count reports", () => {
  const late = { remaining: 1, resetSeconds: 61.2 };
  const written = Object.fromEntries(rateLimitHeaders(LIMIT, late));
  assert.equal(written["RateLimit"], '"key";r=1;t=60');
  const short = { count: 5, windowSeconds: 20 };
  const line = Object.fromEntries(
    rateLimitHeaders(short, late, {
      line: { limit: lineLimit(short), binds: true },
    }),
  );
  assert.equal(line["RateLimit"], '"line";r=1;t=20');
});
