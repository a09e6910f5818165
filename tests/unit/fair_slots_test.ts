import assert from "node:assert/strict";
import fc from "fast-check";
import {
  FairSlots,
  type Slot,
  slotAddress,
} from "../../lib/server/fair_slots.ts";

Deno.test("at the cap a newcomer from a lighter address takes, of the heaviest addresses' connections, the one whose last progress is oldest, stalled or idle", () => {
  const slots = new FairSlots<string>();
  const a = ["a0", "a1", "a2"].map((name) => slots.add("A", name));
  slots.add("B", "b0");
  for (const slot of a) slot.busy(true);
  a[2].busy(false);
  a[1].busy(false);
  assert.equal(
    slots.makeRoomFor("B"),
    "a0",
    "stalled since before the others were answered",
  );
  a[0].busy(false);
  assert.equal(slots.makeRoomFor("C"), "a2", "then idle longest");
  a[2].busy(true);
  assert.equal(slots.makeRoomFor("C"), "a1");
  // Across addresses of one count: the oldest progress of any of them.
  const d = [slots.add("D", "d0"), slots.add("D", "d1"), slots.add("D", "d2")];
  d[0].busy(true);
  assert.equal(slots.makeRoomFor("C"), "a1");
  a[1].busy(true);
  assert.equal(slots.makeRoomFor("C"), "a0");
  a[0].busy(true);
  assert.equal(slots.makeRoomFor("C"), "a2");
  a[2].busy(false);
  assert.equal(slots.makeRoomFor("C"), "d1", "accepted and silent since");
});

Deno.test("a newcomer from the heaviest address may only replace an idle connection of its own, however idle the others are", () => {
  const slots = new FairSlots<string>();
  slots.add("A", "a0").busy(true);
  slots.add("A", "a1").busy(true);
  slots.add("B", "b0");
  slots.add("B", "b1");
  assert.equal(slots.makeRoomFor("A"), undefined);
  const c = slots.add("C", "c0");
  slots.add("C", "c1").busy(true);
  assert.equal(slots.makeRoomFor("C"), "c0");
  c.release();
  assert.equal(
    slots.makeRoomFor("C"),
    "a0",
    "now lighter than A and B: their connection quiet or stalled longest",
  );
});

Deno.test("idle connections are shed from the heaviest address that has one, and released connections leave no trace", () => {
  const slots = new FairSlots<string>();
  const a = ["a0", "a1", "a2"].map((name) => slots.add("A", name));
  for (const slot of a) slot.busy(true);
  const b = [slots.add("B", "b0"), slots.add("B", "b1")];
  slots.add("C", "c0");
  assert.equal(slots.idlest(), "b0");
  a[1].busy(false);
  assert.equal(slots.idlest(), "a1");
  for (const slot of [...a, ...b]) slot.release();
  a[0].release();
  a[0].busy(false); // after release: ignored
  assert.equal(slots.size, 1);
  assert.equal(slots.idlest(), "c0");
  assert.equal(slots.makeRoomFor("A"), "c0");
});

Deno.test("connections count per IPv4 address, per IPv6 /64, and an IPv4-mapped peer as its IPv4 address", () => {
  assert.equal(slotAddress("127.0.0.2"), "127.0.0.2");
  assert.equal(slotAddress("::ffff:127.0.0.2"), "127.0.0.2");
  assert.equal(
    slotAddress("2001:db8:0:1:aaaa::1"),
    slotAddress("2001:db8:0:1:bbbb::2"),
  );
  assert.notEqual(
    slotAddress("2001:db8:0:1::1"),
    slotAddress("2001:db8:0:2::1"),
  );
});

/**
 * What an attacker can do to the slots, one step at a time: open a
 * connection from one of its addresses (at the cap, making room as the
 * server does), start or end a request on one of its connections, or close
 * one.
 */
type _Step =
  | { kind: "open"; address: number; busy: boolean }
  | { kind: "busy" | "idle" | "close"; pick: number };

const _step: fc.Arbitrary<_Step> = fc.oneof(
  fc.record({
    kind: fc.constant("open" as const),
    address: fc.nat(40),
    // A head at once, its body never: stalled on it.
    busy: fc.boolean(),
  }),
  fc.record({
    kind: fc.constantFrom("busy" as const, "idle" as const, "close" as const),
    pick: fc.nat(),
  }),
);

Deno.test("an honest connection that sends its request and ends it within a few of the attacker's steps is never the one cut, whatever the attacker's addresses, churn and idle or stalled connections", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 3, max: 12 }),
      fc.array(_step, { maxLength: 300, size: "max" }),
      fc.array(fc.nat(), { minLength: 1, maxLength: 20 }),
      fc.nat(40),
      (max, steps, delays, honestFrom) => {
        // The honest client's head, then its answer, come within `prompt`
        // attacker steps each: fewer than the slots it would have to
        // outlast, as a request sent at once on loopback or a fast network.
        const prompt = max - 2;
        const slots = new FairSlots<string>();
        const attacker: Slot<string>[] = [];
        let honest: { slot: Slot<string>; phase: number; wait: number } | null =
          null;
        let served = 0;
        let serial = 0;
        const open = (address: string, name: string): Slot<string> | null => {
          if (slots.size >= max) {
            const room = slots.makeRoomFor(address);
            if (room === undefined) return null;
            assert.notEqual(room, "honest", "the honest connection was cut");
            const index = attacker.findIndex((slot) =>
              slot.connection === room
            );
            attacker[index].release();
            attacker.splice(index, 1);
          }
          return slots.add(address, name);
        };
        steps.forEach((step, index) => {
          if (honest === null && index >= honestFrom) {
            const slot = open("honest", "honest")!;
            honest = {
              slot,
              phase: 0,
              wait: delays[served % delays.length] % (prompt + 1),
            };
          }
          if (honest !== null && honest.wait-- === 0) {
            if (honest.phase === 0) {
              honest.slot.busy(true);
              honest.phase = 1;
              honest.wait = delays[(served + 1) % delays.length] % (prompt + 1);
            } else {
              honest.slot.busy(false);
              honest.slot.release();
              honest = null;
              served++;
            }
          }
          if (step.kind === "open") {
            const slot = open(`attacker ${step.address}`, `a${serial++}`);
            if (slot) attacker.push(slot);
            if (slot && step.busy) slot.busy(true);
          } else if (attacker.length > 0) {
            const index = step.pick % attacker.length;
            const slot = attacker[index];
            if (step.kind === "close") {
              slot.release();
              attacker.splice(index, 1);
            } else slot.busy(step.kind === "busy");
          }
        });
      },
    ),
    { numRuns: 2000 },
  );
});

Deno.test("the pick is always the one a plain scan of every connection would make: heaviest address, then least recent progress", () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.record({
          kind: fc.constantFrom("open", "busy", "idle", "close", "pick"),
          address: fc.nat(6),
          pick: fc.nat(),
        }),
        { maxLength: 200, size: "max" },
      ),
      (steps) => {
        const slots = new FairSlots<number>();
        const open: {
          address: string;
          slot: Slot<number>;
          progressed: number;
          idleSince: number | null;
        }[] = [];
        let clock = 0;
        for (const step of steps) {
          const address = `A${step.address}`;
          const chosen = open.length > 0
            ? open[step.pick % open.length]
            : undefined;
          if (step.kind === "open") {
            const slot = slots.add(address, clock);
            open.push({ address, slot, progressed: clock, idleSince: clock });
          } else if (step.kind === "close" && chosen) {
            chosen.slot.release();
            open.splice(open.indexOf(chosen), 1);
          } else if ((step.kind === "busy" || step.kind === "idle") && chosen) {
            chosen.slot.busy(step.kind === "busy");
            chosen.progressed = clock;
            chosen.idleSince = step.kind === "idle" ? clock : null;
          } else if (step.kind === "pick") {
            const count = (a: string) =>
              open.filter((c) => c.address === a).length;
            const heaviest = Math.max(0, ...open.map((c) => count(c.address)));
            const expected = count(address) < heaviest
              ? open.filter((c) => count(c.address) === heaviest)
                .reduce((a, b) => a.progressed < b.progressed ? a : b)
              : open.filter((c) =>
                c.address === address && c.idleSince !== null
              ).reduce<typeof open[0] | undefined>(
                (a, b) => a && a.idleSince! < b.idleSince! ? a : b,
                undefined,
              );
            assert.equal(
              slots.makeRoomFor(address),
              expected?.slot.connection,
            );
          }
          clock++;
        }
        assert.equal(slots.size, open.length);
      },
    ),
    { numRuns: 1000 },
  );
});
