/**
 * `deno task check` reads the key's budget from the RateLimit fields as the
 * service writes them (lib/check/rate_budget.ts): one policy for a key, two
 * for a key of a rotation line, and the budget of the one `RateLimit` names.
 */

import assert from "node:assert/strict";
import { readRateBudget } from "../../lib/check/rate_budget.ts";

const read = (policy: string, left: string) =>
  readRateBudget(
    new Headers({ "ratelimit-policy": policy, "ratelimit": left }),
  );

Deno.test("a key's one policy gives its budget", () => {
  assert.deepEqual(read('"key";q=600;w=60', '"key";r=540;t=42'), {
    quota: 600,
    windowSeconds: 60,
    remaining: 540,
    resetSeconds: 42,
  });
});

Deno.test("a line key's two policies give the budget of the one RateLimit names", () => {
  const both = '"key";q=5;w=60, "line";q=10;w=60';
  assert.deepEqual(read(both, '"line";r=0;t=31'), {
    quota: 10,
    windowSeconds: 60,
    remaining: 0,
    resetSeconds: 31,
  });
  assert.equal(read(both, '"key";r=3;t=9')?.quota, 5);
});

Deno.test("fields not as the service writes them give no budget", () => {
  assert.equal(read('"key";q=5;w=60', '"line";r=0;t=31'), null);
  assert.equal(read('junk, "key";q=5;w=60', '"key";r=0;t=31'), null);
  assert.equal(read("", '"key";r=0;t=31'), null);
});
