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
