/**
 * `keys status` tells live servers from lapsed ones by watching their
 * registrations on its own clock, as a change's wait does: a registration
 * rewritten while watched is live, one unchanged for a whole lease (or
 * removed) is lapsed and never live, and the watch ends within a lease.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { watchServers } from "../../lib/console/_server_watch.ts";
import { LEASE_MARGIN_MS, LEASE_MS } from "../../lib/store/registrations.ts";
import type { InstanceRecord } from "../../lib/store/types.ts";

function record(
  id: string,
  version: number,
  fields: Partial<InstanceRecord> = {},
): InstanceRecord {
  return {
    id,
    version: `${version}`,
    host: "web",
    pid: 1,
    startedAt: "2026-11-26T22:00:00.000Z",
    leaseMs: LEASE_MS,
    acked: 3n,
    ...fields,
  };
}

/**
 * A registry whose listing at time t is `at(t)`, on a clock only the watch's
 * sleeps move: each listing takes `readMs`.
 */
function scripted(
  at: (t: number) => InstanceRecord[],
  readMs: number | ((t: number) => number) = 5,
) {
  let t = 0;
  let listings = 0;
  return {
    registry: {
      instances() {
        listings++;
        const listed = at(t);
        t += typeof readMs === "number" ? readMs : readMs(t);
        return Promise.resolve(listed);
      },
    },
    options: {
      now: () => t,
      sleep: (ms: number) => {
        t += ms;
        return Promise.resolve();
      },
    },
    get listings() {
      return listings;
    },
  };
}

/** A server renewing every `everyMs` from `phase`, dead (no writes) from `diesAt`. */
function renewing(id: string, everyMs: number, phase = 0, diesAt = Infinity) {
  return (t: number) =>
    record(id, Math.floor((Math.min(t, diesAt) + phase) / everyMs));
}

Deno.test("a server renewing every half lease is live, one killed is lapsed, within a lease of the first listing", async () => {
  const alive = renewing("alive", LEASE_MS / 2, 700);
  const dead = renewing("dead", LEASE_MS / 2, 0, -1);
  const run = scripted((t) => [alive(t), dead(t)]);
  const { servers, watchedMs } = await watchServers(run.registry, run.options);
  assert.deepEqual(
    servers.map((s) => [s.record.id, s.state, s.removed]),
    [["alive", "live", false], ["dead", "lapsed", false]],
  );
  assert.ok(watchedMs >= LEASE_MS + LEASE_MARGIN_MS, `${watchedMs}`);
  assert.ok(watchedMs <= LEASE_MS + LEASE_MARGIN_MS + 200, `${watchedMs}`);
  // Live: written at most half a lease, a poll and a listing ago; lapsed:
  // at least a lease ago.
  assert.ok(
    servers[0].leaseAgeMs <= LEASE_MS / 2 + 200,
    `${servers[0].leaseAgeMs}`,
  );
  assert.ok(servers[1].leaseAgeMs >= LEASE_MS, `${servers[1].leaseAgeMs}`);
});

Deno.test("a listing slow to return never makes a server renewing every half lease lapsed: what it shows is as old as its start", async () => {
  // Renewed at 1 500 ms; the listing that starts just before returns 1.7 s
  // later, its registration unchanged since the first listing's end.
  const alive = renewing("alive", LEASE_MS / 2);
  const run = scripted(
    (t) => [alive(t)],
    (t) => t >= LEASE_MS / 2 - 150 && t < LEASE_MS / 2 ? 1700 : 5,
  );
  const { servers } = await watchServers(run.registry, run.options);
  assert.deepEqual(servers.map((s) => s.state), ["live"]);
});

Deno.test("with every server renewing, the watch ends once each has been seen to renew", async () => {
  const a = renewing("a", LEASE_MS / 2, 100);
  const b = renewing("b", LEASE_MS / 2, 900);
  const run = scripted((t) => [a(t), b(t)]);
  const { servers, watchedMs } = await watchServers(run.registry, run.options);
  assert.deepEqual(servers.map((s) => s.state), ["live", "live"]);
  assert.ok(watchedMs <= LEASE_MS / 2 + 200, `${watchedMs}`);
});

Deno.test("a registration removed while watched is lapsed, and says it was removed", async () => {
  const alive = renewing("alive", LEASE_MS / 2, 1000);
  const run = scripted((t) => [
    alive(t),
    ...(t < 300 ? [record("gone", 1)] : []),
  ]);
  const { servers } = await watchServers(run.registry, run.options);
  assert.deepEqual(
    servers.map((s) => [s.record.id, s.state, s.removed]),
    [["alive", "live", false], ["gone", "lapsed", true]],
  );
});

Deno.test("a registration never renewed, or unreadable, is never live, even when rewritten", async () => {
  const run = scripted((t) => [
    record("starting", Math.floor(t / 100), { acked: -1n }),
    record("broken", Math.floor(t / 100), { broken: true, acked: -1n }),
    record("silent", 1, { acked: -1n }),
  ]);
  const { servers, watchedMs } = await watchServers(run.registry, run.options);
  assert.deepEqual(
    servers.map((s) => [s.record.id, s.state]),
    [["starting", "starting"], ["broken", "broken"], ["silent", "lapsed"]],
  );
  assert.ok(watchedMs <= LEASE_MS + LEASE_MARGIN_MS + 200, `${watchedMs}`);
});

Deno.test("no registration: the watch ends at its first listing", async () => {
  const run = scripted(() => []);
  const { servers } = await watchServers(run.registry, run.options);
  assert.deepEqual(servers, []);
  assert.equal(run.listings, 1);
});

Deno.test("whatever servers renew or die, one that wrote nothing for a lease is never live, and the watch ends within a lease", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(
        fc.record({
          everyMs: fc.integer({ min: 50, max: 2 * LEASE_MS }),
          phase: fc.nat(2 * LEASE_MS),
          diesAt: fc.oneof(
            fc.constant(Infinity),
            fc.integer({ min: -LEASE_MS, max: 2 * LEASE_MS }),
          ),
          readMs: fc.integer({ min: 0, max: 400 }),
        }),
        { maxLength: 4 },
      ),
      fc.integer({ min: 0, max: 400 }),
      async (servers, readMs) => {
        const scripts = servers.map((s, i) =>
          renewing(`s${i}`, s.everyMs, s.phase, s.diesAt)
        );
        const run = scripted((t) => scripts.map((at) => at(t)), readMs);
        const watched = await watchServers(run.registry, run.options);
        assert.ok(
          watched.watchedMs <=
            LEASE_MS + LEASE_MARGIN_MS + 100 + 2 * readMs,
        );
        const end = run.options.now();
        watched.servers.forEach((server, i) => {
          const wrote = scripts[i](0).version !== scripts[i](end).version;
          if (!wrote) assert.notEqual(server.state, "live");
          if (servers[i].diesAt <= 0) assert.equal(server.state, "lapsed");
          if (
            servers[i].diesAt === Infinity && servers[i].everyMs <= LEASE_MS / 2
          ) assert.equal(server.state, "live");
        });
      },
    ),
  );
});
