import assert from "node:assert/strict";
import fc from "fast-check";
import { Peers, shareOf } from "../../lib/auth/peers.ts";
import type { InstanceRecord } from "../../lib/store/types.ts";

Deno.test("model: the shares of every server add up to the key's limit exactly, and differ by at most one", () => {
  fc.assert(fc.property(
    fc.integer({ min: 1, max: 100_000 }),
    fc.integer({ min: 1, max: 64 }),
    fc.integer({ min: 1, max: 1_000_000 }),
    (count, servers, keyId) => {
      const shares = Array.from(
        { length: servers },
        (_, rank) => shareOf({ count }, { rank, count: servers, keyId }),
      );
      assert.equal(shares.reduce((a, b) => a + b, 0), count);
      assert.ok(Math.max(...shares) - Math.min(...shares) <= 1);
    },
  ));
});

Deno.test("a limit smaller than the number of servers gives its remainder to different servers for different keys", () => {
  const holders = new Set<number>();
  for (let keyId = 1; keyId <= 3; keyId++) {
    for (let rank = 0; rank < 3; rank++) {
      if (shareOf({ count: 1 }, { rank, count: 3, keyId }) === 1) {
        holders.add(rank);
      }
    }
  }
  assert.equal(holders.size, 3);
});

function registry(ids: string[]) {
  let failing = false;
  return {
    ids,
    fail(on: boolean) {
      failing = on;
    },
    removeInstance: () => Promise.resolve(false),
    instances(): Promise<InstanceRecord[]> {
      if (failing) return Promise.reject(new Error("store unreachable"));
      return Promise.resolve(ids.map((id) => ({
        id,
        host: "test",
        pid: 1,
        startedAt: new Date().toISOString(),
        leaseMs: 3000,
        acked: 0n,
        version: "1",
      })));
    },
  };
}

Deno.test("peers count the live registrations and rank this server by its id, and keep the last view when the store cannot answer", async () => {
  const store = registry(["b", "c", "a"]);
  const peers = new Peers(store, { self: () => "b" });
  await peers.refresh();
  assert.equal(peers.count, 3);
  assert.equal(peers.rank, 1);
  store.ids.push("d");
  store.fail(true);
  await peers.refresh();
  assert.equal(peers.count, 3, "a failed listing keeps the last view");
  store.fail(false);
  await peers.refresh();
  assert.equal(peers.count, 4);
});

Deno.test("a server not listed yet counts itself, so that it never takes the whole limit while others share it", async () => {
  const store = registry(["a", "c"]);
  let self: string | null = null;
  const peers = new Peers(store, { self: () => self });
  await peers.refresh();
  assert.equal(peers.count, 3);
  self = "b";
  assert.equal(peers.count, 3);
  assert.equal(peers.rank, 1);
  assert.equal(peers.share({ count: 9, windowSeconds: 60 }, 1), 3);
});

/** A registration as listed: renewed once (acked 0) unless said otherwise. */
function record(
  id: string,
  version: string,
  fields: Partial<InstanceRecord> = {},
): InstanceRecord {
  return {
    id,
    version,
    host: "test",
    pid: 1,
    startedAt: "2026-01-01T00:00:00.000Z",
    leaseMs: 3000,
    acked: 0n,
    ...fields,
  };
}

/**
 * Registrations by id, removed only at the version asked for, as both
 * stores remove them; `onRemove` runs just before a removal is judged.
 */
function store(records: InstanceRecord[]) {
  const held = new Map(records.map((r) => [r.id, r]));
  return {
    held,
    removals: [] as string[],
    onRemove: () => {},
    instances: () => Promise.resolve([...held.values()]),
    removeInstance(id: string, options: { version?: string } = {}) {
      this.onRemove();
      const current = held.get(id);
      if (current === undefined || current.version !== options.version) {
        return Promise.resolve(false);
      }
      held.delete(id);
      this.removals.push(`${id}@${current.version}`);
      return Promise.resolve(true);
    },
  };
}

/** A monotonic clock the test moves. */
function clock() {
  let now = 1000;
  return { now: () => now, advance: (ms: number) => now += ms };
}

Deno.test("a registration listed unchanged for longer than its lease is not counted, and is removed at that version", async () => {
  const registrations = store([record("self", "s1"), record("ghost", "g1")]);
  const time = clock();
  const counts: number[] = [];
  const peers = new Peers(registrations, {
    self: () => "self",
    now: time.now,
    onChange: (count) => counts.push(count),
  });
  await peers.refresh();
  assert.equal(peers.count, 2);
  time.advance(3000);
  await peers.refresh();
  assert.equal(peers.count, 2, "within its lease (and the 50 ms margin)");
  time.advance(51);
  await peers.refresh();
  assert.equal(peers.count, 1);
  assert.deepEqual(counts, [2, 1]);
  assert.deepEqual(registrations.removals, ["ghost@g1"]);
  assert.deepEqual([...registrations.held.keys()], ["self"]);
});

Deno.test("a registration that renews within its lease is counted and kept however long it lives, and a shorter lease lapses sooner", async () => {
  const registrations = store([
    record("self", "s1"),
    record("live", "l0"),
    record("short", "t1", { leaseMs: 500 }),
    // Claims more than any server may hold: counts as LEASE_MS.
    record("greedy", "x1", { leaseMs: 3_600_000 }),
  ]);
  const time = clock();
  const peers = new Peers(registrations, { self: () => "self", now: time.now });
  for (let i = 1; i <= 10; i++) {
    await peers.refresh();
    time.advance(1000);
    registrations.held.set("live", record("live", `l${i}`));
  }
  assert.deepEqual(registrations.removals, ["short@t1", "greedy@x1"]);
  assert.equal(peers.count, 2);
  assert.ok(registrations.held.has("live"));
});

Deno.test("a removal conditional on the version seen never removes a registration that renewed meanwhile", async () => {
  const registrations = store([record("self", "s1"), record("slow", "v1")]);
  const time = clock();
  const peers = new Peers(registrations, { self: () => "self", now: time.now });
  await peers.refresh();
  time.advance(4000);
  // Renewed after the listing that found it lapsed, before the removal.
  registrations.onRemove = () =>
    registrations.held.set("slow", record("slow", "v2"));
  await peers.refresh();
  assert.equal(peers.count, 1, "not counted on the listing that saw v1 old");
  assert.deepEqual(registrations.removals, []);
  assert.equal(registrations.held.get("slow")?.version, "v2");
  registrations.onRemove = () => {};
  await peers.refresh();
  assert.equal(peers.count, 2, "its renewal counts from the next listing");
});

Deno.test("a registration that never renewed, or cannot be read, does not count; this server always counts itself", async () => {
  const registrations = store([
    // Its own registration, never renewed, unchanged past any lease.
    record("self", "s1", { acked: -1n }),
    record("starting", "n1", { acked: -1n }),
    record("broken", "b1", { broken: true, leaseMs: Number.NaN }),
  ]);
  const time = clock();
  const peers = new Peers(registrations, { self: () => "self", now: time.now });
  await peers.refresh();
  assert.equal(peers.count, 1);
  assert.equal(peers.share({ count: 10, windowSeconds: 60 }, 1), 10);
  time.advance(3051);
  await peers.refresh();
  assert.equal(peers.count, 1);
  // Left to its own lease (lib/auth/lease.ts) to find.
  assert.ok(registrations.held.has("self"));
  assert.deepEqual(registrations.removals, ["starting@n1", "broken@b1"]);
});
