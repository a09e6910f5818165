/**
 * The outbox against a model: whatever sequence of changes, endpoints added
 * and removed, and changes refused, each endpoint holds exactly one delivery
 * per audit line its subscription covered when the line was written, of the
 * event type the line stands for, and nothing for a change not made.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import type { KeyService } from "../../lib/store/keys.ts";
import {
  EVENT_TYPES,
  type KeyEventType,
} from "../../lib/store/webhook_types.ts";
import type { AuditEntry } from "../../lib/store/types.ts";

const ACTOR = { actor: "model" };

type Op =
  | { op: "create" }
  | { op: "revoke" | "rotate" | "expose" | "limit"; key: number }
  | { op: "subscribe"; events: KeyEventType[] }
  | { op: "unsubscribe"; endpoint: number };

const TYPE_OF: Record<string, KeyEventType> = {
  create: "key.created",
  revoke: "key.revoked",
  rotate: "key.rotated",
  expose: "key.exposed",
  rate_limit: "key.updated",
  allow_from: "key.updated",
  network: "key.new_network",
};

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.constant({ op: "create" as const }),
  fc.record({
    op: fc.constantFrom(
      "revoke" as const,
      "rotate" as const,
      "expose" as const,
      "limit" as const,
    ),
    key: fc.integer({ min: 1, max: 4 }),
  }),
  fc.record({
    op: fc.constant("subscribe" as const),
    events: fc.subarray([...EVENT_TYPES], { minLength: 1 }),
  }),
  fc.record({
    op: fc.constant("unsubscribe" as const),
    endpoint: fc.integer({ min: 1, max: 4 }),
  }),
);

async function apply(store: KeyService, step: Op, n: number): Promise<void> {
  try {
    switch (step.op) {
      case "create": {
        const fresh = generateApiKey();
        await store.create({
          name: `k${n}`,
          email: `k${n}@example.com`,
          hash: fresh.hash,
          hint: fresh.hint,
        }, ACTOR);
        return;
      }
      case "revoke":
        await store.revoke(step.key, ACTOR);
        return;
      case "rotate":
        await store.rotate(step.key, generateApiKey(), ACTOR);
        return;
      case "expose":
        await store.markExposed(step.key, {
          ...ACTOR,
          from: "192.0.2.1",
          source: n % 2 === 0 ? "url" : "report",
        });
        return;
      case "limit":
        await store.setRateLimit(step.key, {
          count: n + 1,
          windowSeconds: 60,
        }, ACTOR);
        return;
      case "subscribe":
        await store.webhooks.addEndpoint({
          url: `https://hooks${n}.example.com/`,
          events: step.events,
          signingKey: "c2VjcmV0",
        });
        return;
      case "unsubscribe":
        await store.webhooks.removeEndpoint(step.endpoint);
        return;
    }
  } catch (error) {
    // A refused change (an unknown key, a revoked one) writes nothing.
    if (!(error instanceof Error && "code" in error)) throw error;
  }
}

async function auditLines(store: KeyService): Promise<AuditEntry[]> {
  const lines: AuditEntry[] = [];
  for await (const line of store.audit()) lines.push(line);
  return lines;
}

Deno.test("each endpoint holds one delivery per audit line its subscription covered when written, of the line's event type, whatever the sequence", async () => {
  let deliveries = 0;
  await fc.assert(
    fc.asyncProperty(
      fc.array(op, { minLength: 1, maxLength: 30 }),
      async (tail) => {
        // Something to deliver from the start: an endpoint for all, two keys.
        const ops: Op[] = [
          { op: "subscribe", events: [...EVENT_TYPES] },
          { op: "create" },
          { op: "create" },
          ...tail,
        ];
        const store = await openKvStore(":memory:");
        try {
          const expected: string[] = [];
          let seen = 0;
          for (const [n, step] of ops.entries()) {
            const before = await store.webhooks.endpoints();
            await apply(store, step, n);
            const lines = await auditLines(store);
            for (const line of lines.slice(seen)) {
              for (const endpoint of before) {
                const type = TYPE_OF[line.action];
                if (endpoint.events.includes(type)) {
                  expected.push(`${endpoint.id} ${type} ${line.keyId}`);
                }
              }
            }
            seen = lines.length;
          }
          // Removed endpoints' deliveries stay until the sweep drops them.
          const actual = (await store.webhooks.deliveries()).map((d) =>
            `${d.endpointId} ${d.event.type} ${d.event.data.keyId}`
          );
          assert.deepEqual(actual.sort(), expected.sort());
          deliveries += actual.length;
          for (const delivery of await store.webhooks.deliveries()) {
            assert.ok(!JSON.stringify(delivery).includes('"hash"'));
            if (delivery.event.type === "key.exposed") {
              assert.match(
                String(delivery.event.data.source),
                /^(url|report)$/,
              );
            }
          }
        } finally {
          await store.close();
        }
      },
    ),
    { numRuns: 60 },
  );
  assert.ok(deliveries > 100, `only ${deliveries} deliveries in all runs`);
});
