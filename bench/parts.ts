/**
 * Where a request's JavaScript time goes, part by part: each piece of the
 * request path called in a loop in this process, with no socket, and the
 * whole handler called directly for a valid key, for the same JSON with no
 * authentication, and for bare `Deno.serve`'s handler, printed in
 * nanoseconds per call: `deno run --allow-env=PARTS_MS
 * --v8-flags=--max-semi-space-size=2 bench/parts.ts` (an in-memory store,
 * no network). docs/performance.md sets them beside the CPU profiles of the
 * server under wrk.
 *
 * In-process loops are steadier than wrk on a shared machine, but they
 * flatter what a request pays in a real server (warm caches, no other
 * work between calls): read them as a breakdown, not as throughput.
 *
 * Environment: PARTS_MS (300, the time spent on each part).
 *
 * @module
 */

import {
  generateApiKey,
  hashApiKey,
  isWellFormedApiKey,
} from "../lib/auth/api_key.ts";
import { clientAddress, lockoutKey } from "../lib/net/client_address.ts";
import { createHandler } from "../lib/server/handler.ts";
import { createAuthenticator } from "../lib/http/authenticate.ts";
import { json } from "../lib/http/responses.ts";
import { createRouter } from "../lib/http/router.ts";
import { urlCarriesCredential } from "../lib/http/url_credentials.ts";
import { parseCidr } from "../lib/net/ip.ts";
import { KeyLookup } from "../lib/auth/key_lookup.ts";
import { LastUsedRecorder } from "../lib/usage/last_used.ts";
import { Lease } from "../lib/auth/lease.ts";
import { LockoutTracker } from "../lib/auth/lockout.ts";
import { JsonLog } from "../lib/http/log.ts";
import { openStore } from "../lib/store/open.ts";
import { annotateRequest, countOutcome } from "../lib/http/telemetry.ts";
import { UsageRecorder } from "../lib/usage/networks.ts";
import { addNeverLimitedKey } from "./stores.ts";
import { statusBody } from "./status_body.ts";

const PART_MS = Number(Deno.env.get("PARTS_MS") ?? 300);
const ROUTE = "/api/v1/integration/connection";
const URL_ = `http://127.0.0.1:8000${ROUTE}`;

/** Nanoseconds per call of `fn`, over about PART_MS of calls after a warm-up. */
async function time(fn: () => unknown): Promise<number> {
  const run = async (ms: number) => {
    let calls = 0;
    const started = performance.now();
    const until = started + ms;
    while (performance.now() < until) {
      // Promises of one batch settle together, as a turn's requests do.
      const pending: unknown[] = [];
      for (let i = 0; i < 200; i++) {
        const r = fn();
        if (r instanceof Promise) pending.push(r);
      }
      if (pending.length > 0) await Promise.all(pending);
      calls += 200;
    }
    return ((performance.now() - started) * 1e6) / calls;
  };
  await run(PART_MS / 3);
  return await run(PART_MS);
}

/**
 * Nanoseconds per call of `a` and of `b`, their batches run in turn over
 * about 4 × PART_MS after a warm-up.
 */
async function paired(
  a: () => unknown,
  b: () => unknown,
): Promise<[number, number]> {
  const spent = [0, 0];
  const batch = async (fn: () => unknown, slot: number) => {
    const started = performance.now();
    const pending: unknown[] = [];
    for (let i = 0; i < 200; i++) pending.push(fn());
    await Promise.all(pending);
    spent[slot] += performance.now() - started;
  };
  let rounds = 0;
  const until = performance.now() + 4 * PART_MS;
  for (let warm = 0; warm < 20; warm++) await batch(warm % 2 ? a : b, 0);
  spent[0] = 0;
  while (performance.now() < until) {
    // Which goes first turns too: neither always follows a pause.
    if (rounds % 2 === 0) {
      await batch(a, 0);
      await batch(b, 1);
    } else {
      await batch(b, 1);
      await batch(a, 0);
    }
    rounds++;
  }
  return [spent[0] * 1e6 / (rounds * 200), spent[1] * 1e6 / (rounds * 200)];
}

/** The parts, in the order a request meets them; each line is name and ns. */
export async function measureParts(): Promise<[string, number][]> {
  const out: [string, number][] = [];
  const add = async (name: string, fn: () => unknown) => {
    out.push([name, await time(fn)]);
  };
  const store = await openStore({ kind: "kv", path: ":memory:" });
  const { key, hash, hint } = generateApiKey();
  await store.create(
    { name: "parts", email: "parts@example.com", hash, hint },
    {
      actor: "bench",
    },
  );
  // The same key with a rate limit it never reaches, for the cost of the
  // limit on the valid-key path.
  const limited = generateApiKey();
  await addNeverLimitedKey(
    store,
    "parts-limited",
    "parts@example.com",
    limited,
  );
  const lease = new Lease(store);
  await lease.start();
  const proxies = { trustedProxies: [parseCidr("127.0.0.1")!] };
  const info = {
    remoteAddr: { transport: "tcp", hostname: "127.0.0.1", port: 50000 },
    completed: Promise.resolve(),
  } as Deno.ServeHandlerInfo<Deno.NetAddr>;
  const request = new Request(URL_, { headers: { "X-API-Key": key } });
  const lockout = new LockoutTracker({
    maxFailures: 1e9,
    windowSeconds: 60,
    lockSeconds: 300,
  });
  const lookup = new KeyLookup(store, { lease });
  await lookup.authenticate(key);
  const lastUsed = new LastUsedRecorder(store, { flushMs: 3_600_000 });
  const usage = new UsageRecorder(store, { flushMs: 3_600_000 });
  const sink = { write: (b: Uint8Array) => Promise.resolve(b.length) };
  const log = new JsonLog({ out: sink });
  const body = statusBody;

  await add(
    "new Request (what Deno builds per request)",
    () => new Request(URL_, { headers: { "X-API-Key": key } }),
  );
  await add(
    "request.headers.get(X-API-Key)",
    () => request.headers.get("X-API-Key"),
  );
  await add(
    "clientAddress (a trusted proxy configured)",
    () => clientAddress(request, info, proxies),
  );
  await add("urlCarriesCredential", () => urlCarriesCredential(ROUTE, ""));
  await add("lockout.retryAfter", () => lockout.retryAfter("127.0.0.1"));
  await add("isWellFormedApiKey", () => isWellFormedApiKey(key));
  await add("hashApiKey (SHA-256)", () => hashApiKey(key));
  await add(
    "KeyLookup.authenticate (all of the above two, index, cache)",
    () => lookup.authenticate(key),
  );
  await add(
    "countOutcome (telemetry, no-op provider)",
    () => countOutcome("ok", ROUTE),
  );
  await add(
    "annotateRequest (telemetry)",
    () => annotateRequest({ route: ROUTE, apiKeyId: 1 }),
  );
  await add("lastUsed.used", () => lastUsed.used(1, Date.now()));
  await add(
    "usage.used",
    () => usage.used(1, lockoutKey("127.0.0.1"), Date.now()),
  );
  await add(
    "JSON body + Response (the route's answer)",
    () => json(200, JSON.parse(body())),
  );
  await add("log.request (the request's log line)", () =>
    log.request({
      requestId: "0a1b2c3d-1",
      method: "GET",
      path: ROUTE,
      status: 200,
      durationMs: 0.123,
      client: "127.0.0.1",
      apiKeyId: 1,
    }));

  const full = createHandler(store, {
    lastUsed,
    usage,
    lockout,
    trustedProxies: proxies.trustedProxies,
    log: (fields) => log.write(fields),
    logRequest: (line) => log.request(line),
    lease,
  });
  const noAuth = createRouter([{
    path: ROUTE,
    auth: "none",
    methods: { GET: () => json(200, JSON.parse(body())) },
  }], {
    authenticator: createAuthenticator(store, { lease }),
    trustedProxies: proxies.trustedProxies,
    log: (fields) => log.write(fields),
    logRequest: (line) => log.request(line),
  });
  const bare = () =>
    new Response(body(), {
      headers: {
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
        "content-type": "application/json",
      },
    });
  await add("handler: bare Deno.serve's", () => bare());
  await add(
    "handler: same serving layer, no authentication",
    () => noAuth(new Request(URL_, { headers: { "X-API-Key": key } }), info),
  );
  await add(
    "handler: valid key",
    () => full(new Request(URL_, { headers: { "X-API-Key": key } }), info),
  );
  // Batch by batch in turn, so that a slower stretch of a shared machine
  // falls on both alike: the ratio is what the limit costs.
  const [without, withLimit] = await paired(
    () => full(new Request(URL_, { headers: { "X-API-Key": key } }), info),
    () =>
      full(new Request(URL_, { headers: { "X-API-Key": limited.key } }), info),
  );
  out.push(["handler: valid key, in turn with the next", without]);
  out.push(["handler: valid key with a rate limit (never reached)", withLimit]);
  await lastUsed.close();
  await usage.close();
  await lease.stop();
  await store.close();
  return out;
}

if (import.meta.main) {
  for (const [name, ns] of await measureParts()) {
    console.log(`${String(Math.round(ns)).padStart(7)} ns  ${name}`);
  }
}
