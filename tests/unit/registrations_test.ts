/**
 * A registration's release and figures only inform `keys status`: read back
 * as written, and, written wrong (by a bug, another version or a hand), read
 * as absent without making the registration broken, which would hold every
 * change up for a lease and have it removed.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import {
  readRegistration,
  storedInstance,
} from "../../lib/store/registrations.ts";
import type { InstanceInfo, ServerFigures } from "../../lib/store/types.ts";

const FIGURES: ServerFigures = {
  at: "2026-11-26T23:00:00.000Z",
  lastMinute: {
    requests: 12,
    ok: 9,
    unauthorized: 2,
    lockedOut: 1,
    rateLimited: 0,
    rateLimitedKeys: 0,
  },
  sinceStart: {
    requests: 120,
    ok: 90,
    unauthorized: 20,
    lockedOut: 5,
    rateLimited: 5,
    rateLimitedKeys: 1,
  },
  lockedAddresses: 1,
};

const INFO: InstanceInfo = {
  id: "a1",
  host: "web-1",
  pid: 4242,
  startedAt: "2026-11-26T22:00:00.000Z",
  leaseMs: 3000,
  acked: 41n,
  release: "1.0.0",
  figures: FIGURES,
};

/** `stored` as a backend hands it back: through JSON, as PostgreSQL keeps it. */
function read(stored: unknown) {
  return readRegistration({ id: "a1", version: "v1", stored });
}

Deno.test("a registration's release and figures read back as written", () => {
  const stored = JSON.parse(JSON.stringify(storedInstance(INFO)));
  assert.deepEqual(read(stored), { ...INFO, version: "v1" });
  // Structured clone, as Deno KV keeps it.
  assert.deepEqual(read(structuredClone(storedInstance(INFO))), {
    ...INFO,
    version: "v1",
  });
});

Deno.test("a registration of a server without release or figures reads whole, without them", () => {
  const { release: _r, figures: _f, ...older } = INFO;
  const record = read(storedInstance(older));
  assert.equal(record.broken, undefined);
  assert.ok(!("release" in record) && !("figures" in record));
});

Deno.test("a malformed release or figures reads as absent, the registration whole", () => {
  const stored = storedInstance(INFO);
  const wrongFigures: unknown[] = [
    null,
    "12",
    [],
    { ...FIGURES, at: "yesterday" },
    { ...FIGURES, lockedAddresses: -1 },
    { ...FIGURES, lockedAddresses: 1.5 },
    { ...FIGURES, lastMinute: { ...FIGURES.lastMinute, ok: "9" } },
    { ...FIGURES, sinceStart: { ...FIGURES.sinceStart, requests: 2 ** 60 } },
    { ...FIGURES, sinceStart: undefined },
  ];
  for (const figures of wrongFigures) {
    const record = read({ ...stored, figures });
    assert.equal(record.broken, undefined, JSON.stringify(figures));
    assert.equal(record.figures, undefined, JSON.stringify(figures));
    assert.equal(record.release, "1.0.0");
    assert.equal(record.acked, 41n);
  }
  const wrongReleases: unknown[] = [
    5,
    "",
    "1.0.0 with spaces",
    "\u001b[31m1.0.0",
    "1".repeat(65),
    { version: "1.0.0" },
  ];
  for (const release of wrongReleases) {
    const record = read({ ...stored, release });
    assert.equal(record.broken, undefined, JSON.stringify(release));
    assert.equal(record.release, undefined, JSON.stringify(release));
    assert.deepEqual(record.figures, FIGURES);
  }
});

Deno.test("figures keep only their counts: a field they do not have is left behind", () => {
  const stored = storedInstance(INFO);
  const record = read({
    ...stored,
    figures: {
      ...FIGURES,
      email: "ops@example.com",
      lastMinute: { ...FIGURES.lastMinute, key: "isk_secret" },
    },
  });
  assert.deepEqual(record.figures, FIGURES);
});

Deno.test("whatever a registration's release and figures hold, it reads whole, and they as written or absent", () => {
  const count = fc.oneof(fc.nat(), fc.anything());
  const traffic = fc.record({
    requests: count,
    ok: count,
    unauthorized: count,
    lockedOut: count,
    rateLimited: count,
    rateLimitedKeys: count,
  }, { requiredKeys: [] });
  const figures = fc.oneof(
    fc.anything(),
    fc.record({
      at: fc.oneof(fc.date({ noInvalidDate: true }).map(String), fc.string()),
      lastMinute: fc.oneof(traffic, fc.anything()),
      sinceStart: fc.oneof(traffic, fc.anything()),
      lockedAddresses: count,
    }, { requiredKeys: [] }),
  );
  fc.assert(
    fc.property(
      fc.oneof(fc.anything(), fc.string()),
      figures,
      (release, figures) => {
        const record = read({ ...storedInstance(INFO), release, figures });
        assert.equal(record.broken, undefined);
        assert.equal(record.acked, 41n);
        if (record.release !== undefined) assert.equal(record.release, release);
        if (record.figures !== undefined) {
          const counts = [
            record.figures.lockedAddresses,
            ...Object.values(record.figures.lastMinute),
            ...Object.values(record.figures.sinceStart),
          ];
          assert.equal(counts.length, 13);
          assert.ok(counts.every((n) => Number.isSafeInteger(n) && n >= 0));
          assert.ok(!Number.isNaN(Date.parse(record.figures.at)));
        }
      },
    ),
  );
});
