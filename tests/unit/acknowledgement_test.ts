/**
 * What a change's wait for the servers reports (lib/store/acknowledged.ts),
 * against a registry whose answers the test scripts: the console words its
 * lines from this report.
 */

import assert from "node:assert/strict";
import {
  awaitAcknowledgement,
  type Registry,
} from "../../lib/store/acknowledged.ts";
import type { InstanceRecord } from "../../lib/store/types.ts";

function registration(id: string, acked: bigint): InstanceRecord {
  return {
    id,
    host: "web-2",
    pid: 4242,
    startedAt: "2026-11-23T08:00:00.000Z",
    leaseMs: 3000,
    acked,
    version: "1",
  };
}

/** A registry that answers each read of the registrations with the next list. */
function scripted(lists: InstanceRecord[][]): Registry & { removed: string[] } {
  let read = 0;
  const removed: string[] = [];
  return {
    removed,
    revision: () => Promise.resolve(5n),
    instances: () => Promise.resolve(lists[Math.min(read++, lists.length - 1)]),
    removeInstance: (id) => {
      removed.push(id);
      return Promise.resolve(true);
    },
  };
}

Deno.test("a server that owed the change and is gone at the next read is reported as not having confirmed, though another wait removed it", async () => {
  const frozen = registration("frozen", 4n);
  const live = registration("live", 5n);
  // Another wait (a server settling a read) removes the frozen server's
  // registration between this wait's reads.
  const registry = scripted([[frozen, live], [live]]);
  const report = await awaitAcknowledgement(registry, { revision: 5n });
  assert.deepEqual(report.lapsed, [
    { id: "frozen", host: "web-2", pid: 4242, gone: true },
  ]);
  assert.deepEqual(
    registry.removed,
    [],
    "removed by the other wait, not this one",
  );
  assert.equal(report.servers, 1);
});

Deno.test("a server that confirmed and then stopped is not reported", async () => {
  const slow = registration("slow", 4n);
  const registry = scripted([
    [slow],
    [{ ...slow, acked: 5n, version: "2" }],
    [],
  ]);
  const report = await awaitAcknowledgement(registry, { revision: 5n });
  assert.deepEqual(report.lapsed, []);
});
