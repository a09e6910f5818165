/**
 * A server's registration carries its release and, with each lease renewal,
 * its figures, on Deno KV and on PostgreSQL: read back by another connection
 * as `keys status` reads them, at no write beyond the renewals themselves.
 */

import assert from "node:assert/strict";
import { Lease } from "../../lib/auth/lease.ts";
import { counted } from "../../lib/store/counted.ts";
import type { KeyService } from "../../lib/store/keys.ts";
import { openPostgresStore } from "../../lib/store/postgres/store.ts";
import type {
  InstanceRecord,
  KeyStore,
  ServerFigures,
} from "../../lib/store/types.ts";
import { VERSION } from "../../lib/util/version.ts";
import { sharedKvFile } from "../support/kv_shared.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";
import { until } from "../support/wait.ts";

/** Figures whose counts grow by one at each read: which read a write carried. */
function fakeFigures() {
  let reads = 0;
  const figures = (): ServerFigures => {
    reads++;
    const traffic = {
      requests: reads,
      ok: reads,
      unauthorized: 0,
      lockedOut: 0,
      rateLimited: 0,
      rateLimitedKeys: 0,
    };
    return {
      at: new Date().toISOString(),
      lastMinute: traffic,
      sinceStart: traffic,
      lockedAddresses: 0,
    };
  };
  return { figures, reads: () => reads };
}

const WRITES: (keyof KeyStore)[] = ["registerInstance", "renewInstance"];

async function publishes(open: () => Promise<KeyService>): Promise<void> {
  const server = counted(await open());
  const reader = await open();
  const fake = fakeFigures();
  const lease = new Lease(server.store, {
    leaseMs: 200,
    pollMs: 5,
    figures: fake.figures,
  });
  try {
    await lease.start();
    const own = async (): Promise<InstanceRecord | undefined> =>
      (await reader.instances()).find((one) => one.id === lease.id);
    const first = await own();
    assert.ok(first !== undefined);
    assert.equal(first.release, VERSION);
    // Renewed three times more, each renewal with the figures of its moment.
    const seen = new Set([first.version]);
    await until(async () => {
      const now = await own();
      if (now !== undefined) seen.add(now.version);
      return seen.size >= 4;
    }, "three renewals");
    await lease.stop();
    const counts = server.counts();
    const writes = WRITES.reduce((sum, name) => sum + (counts[name] ?? 0), 0);
    // Read once per write of the registration, at no write of its own.
    assert.equal(fake.reads(), writes);
    for (
      const name of Object.keys(counts) as (keyof KeyStore)[]
    ) {
      assert.ok(
        [
          ...WRITES,
          "pollInstance",
          "changesSince",
          "removeInstance",
          "onChange",
        ]
          .includes(name),
        `the lease called ${name}`,
      );
    }
  } finally {
    await lease.stop();
    await server.store.close();
    await reader.close();
  }
}

async function lastFiguresRead(open: () => Promise<KeyService>) {
  const server = await open();
  const reader = await open();
  const fake = fakeFigures();
  const lease = new Lease(server, {
    leaseMs: 200,
    pollMs: 5,
    figures: fake.figures,
  });
  try {
    await lease.start();
    let record: InstanceRecord | undefined;
    await until(async () => {
      record = (await reader.instances()).find((one) => one.id === lease.id);
      return (record?.figures?.sinceStart.requests ?? 0) >= 3;
    }, "the figures of a third write");
    assert.equal(record!.broken, undefined);
    assert.equal(record!.release, VERSION);
    assert.ok(record!.figures!.sinceStart.requests <= fake.reads());
  } finally {
    await lease.stop();
    await server.close();
    await reader.close();
  }
}

Deno.test("Deno KV: a registration carries the release, and each renewal the figures of its moment, read at no other write", async () => {
  await using shared = await sharedKvFile();
  await publishes(() => shared.open());
  await lastFiguresRead(() => shared.open());
});

Deno.test({
  name:
    "PostgreSQL: a registration carries the release, and each renewal the figures of its moment, read at no other write",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const open = () => openPostgresStore(database.url);
    await publishes(open);
    await lastFiguresRead(open);
  },
});

Deno.test("figures that cannot be read cost the lease nothing: it registers and renews without them", async () => {
  await using shared = await sharedKvFile();
  const server = await shared.open();
  const reader = await shared.open();
  const lease = new Lease(server, {
    leaseMs: 200,
    pollMs: 5,
    figures: () => {
      throw new Error("figures broke");
    },
  });
  try {
    await lease.start();
    assert.ok(lease.held);
    const seen = new Set<string>();
    await until(async () => {
      const own = (await reader.instances()).find((one) => one.id === lease.id);
      assert.ok(own !== undefined && !own.broken && !("figures" in own));
      seen.add(own.version);
      return seen.size >= 2;
    }, "a renewal");
  } finally {
    await lease.stop();
  }
});
