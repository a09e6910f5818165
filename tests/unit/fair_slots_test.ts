import assert from "node:assert/strict";
import fc from "fast-check";
import {
  FairSlots,
  type Slot,
  slotAddress,
} from "../../lib/server/fair_slots.ts";

Deno.test("at the cap a newcomer from a lighter address takes the connection accepted first of every address while none holds more than 3, else of those holding the most or one fewer, however recently it sent a request or got an answer", () => {
  const slots = new FairSlots<string>();
  const a = ["a0", "a1", "a2"].map((name) => slots.add("A", name));
  slots.add("B", "b0");
  for (const slot of a) slot.busy(true);
  a[2].busy(false);
  a[1].busy(false);
  assert.equal(slots.makeRoomFor("B"), "a0", "stalled or not: first accepted");
  a[0].busy(false);
  a[0].busy(true);
  a[0].busy(false);
  assert.equal(slots.makeRoomFor("C"), "a0", "a request buys it nothing");
  // Across addresses of one count: the first accepted of any of them.
  const d = [slots.add("D", "d0"), slots.add("D", "d1"), slots.add("D", "d2")];
  d[0].busy(true);
  assert.equal(slots.makeRoomFor("C"), "a0");
  a[0].release();
  assert.equal(
    slots.makeRoomFor("C"),
    "a1",
    "D holds 3, so every address is in play: A's connection accepted first",
  );
  d[0].release();
  assert.equal(slots.makeRoomFor("C"), "a1", "A and D hold 2 each");
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
    "now lighter than A and B: their connection accepted first",
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
 * server does) that stays silent, stalls on its body, or is hot: re-sends a
 * cheap request as soon as each answer leaves, so it makes progress at
 * every step, at the server's own pace; start or end a request on one of
 * its connections, or close one. Each step, every hot connection gets its
 * answer and, unless `hotAnswered`, sends its next head.
 */
type _Step =
  | { kind: "open"; address: number; as: "silent" | "stalled" | "hot" }
  | { kind: "busy" | "idle" | "close"; pick: number; hotAnswered: boolean };

const _step: fc.Arbitrary<_Step> = fc.oneof(
  fc.record({
    kind: fc.constant("open" as const),
    address: fc.nat(40),
    as: fc.constantFrom("silent" as const, "stalled" as const, "hot" as const),
  }),
  fc.record({
    kind: fc.constantFrom("busy" as const, "idle" as const, "close" as const),
    pick: fc.nat(),
    hotAnswered: fc.boolean(),
  }),
);

Deno.test("an honest connection is cut only after MAX_CONNECTIONS - 1 accepts since its own, whatever the attacker's addresses, churn, and silent, stalled or hot connections answered at every step", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 3, max: 12 }),
      fc.array(_step, { maxLength: 300, size: "max" }),
      // Steps to the honest head (within the header timeout), then to its
      // answer: the attacker's steps meanwhile are what it gets for free.
      fc.array(fc.nat(40), { minLength: 1, maxLength: 20 }),
      fc.nat(40),
      (max, steps, delays, honestFrom) => {
        const slots = new FairSlots<string>();
        const attacker: { slot: Slot<string>; hot: boolean }[] = [];
        let honest: {
          slot: Slot<string>;
          phase: number;
          wait: number;
          acceptsSince: number;
        } | null = null;
        let served = 0;
        let serial = 0;
        const open = (address: string, name: string): Slot<string> | null => {
          if (slots.size >= max) {
            const room = slots.makeRoomFor(address);
            if (room === undefined) return null;
            if (room === "honest") {
              assert.ok(
                honest!.acceptsSince >= max - 1,
                `the honest connection was cut after ${
                  honest!.acceptsSince
                } accepts of the attacker's`,
              );
              honest!.slot.release();
              honest = null;
            } else {
              const index = attacker.findIndex((held) =>
                held.slot.connection === room
              );
              attacker[index].slot.release();
              attacker.splice(index, 1);
            }
          }
          return slots.add(address, name);
        };
        steps.forEach((step, index) => {
          if (honest === null && index >= honestFrom) {
            const slot = open("honest", "honest")!;
            honest = {
              slot,
              phase: 0,
              wait: delays[served % delays.length],
              acceptsSince: 0,
            };
          }
          if (honest !== null && honest.wait-- === 0) {
            if (honest.phase === 0) {
              honest.slot.busy(true);
              honest.phase = 1;
              honest.wait = delays[(served + 1) % delays.length];
            } else {
              honest.slot.busy(false);
              honest.slot.release();
              honest = null;
              served++;
            }
          }
          const hotAnswered = step.kind !== "open" && step.hotAnswered;
          for (const held of attacker) {
            if (!held.hot) continue;
            held.slot.busy(false);
            if (!hotAnswered) held.slot.busy(true);
          }
          if (step.kind === "open") {
            const slot = open(`attacker ${step.address}`, `a${serial++}`);
            if (slot === null) return;
            if (honest !== null) honest.acceptsSince++;
            attacker.push({ slot, hot: step.as === "hot" });
            if (step.as !== "silent") slot.busy(true);
          } else if (attacker.length > 0) {
            const index = step.pick % attacker.length;
            const held = attacker[index];
            if (step.kind === "close") {
              held.slot.release();
              attacker.splice(index, 1);
            } else held.slot.busy(step.kind === "busy");
          }
        });
      },
    ),
    { numRuns: 2000 },
  );
});

Deno.test("the pick is always the one a plain scan of every connection would make: the first accepted of every address while none holds more than 3, else of those holding the most or one fewer; from a heaviest address of 2 or more, its own longest-quiet idle one, answered ones first", () => {
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
          accepted: number;
          idleSince: number | null;
          answered: boolean;
        }[] = [];
        let clock = 0;
        for (const step of steps) {
          const address = `A${step.address}`;
          const chosen = open.length > 0
            ? open[step.pick % open.length]
            : undefined;
          if (step.kind === "open") {
            const slot = slots.add(address, clock);
            open.push({
              address,
              slot,
              accepted: clock,
              idleSince: clock,
              answered: false,
            });
          } else if (step.kind === "close" && chosen) {
            chosen.slot.release();
            open.splice(open.indexOf(chosen), 1);
          } else if ((step.kind === "busy" || step.kind === "idle") && chosen) {
            chosen.slot.busy(step.kind === "busy");
            chosen.idleSince = step.kind === "idle" ? clock : null;
            chosen.answered = step.kind === "idle";
          } else if (step.kind === "pick") {
            const count = (a: string) =>
              open.filter((c) => c.address === a).length;
            const heaviest = Math.max(0, ...open.map((c) => count(c.address)));
            const own = count(address);
            const expected = own < heaviest || heaviest === 1
              ? open.filter((c) =>
                count(c.address) >= (heaviest <= 3 ? 1 : heaviest - 1)
              ).reduce((a, b) => a.accepted < b.accepted ? a : b)
              : [true, false].map((answered) =>
                open.filter((c) =>
                  c.address === address && c.idleSince !== null &&
                  c.answered === answered
                ).reduce<typeof open[0] | undefined>(
                  (a, b) => a && a.idleSince! < b.idleSince! ? a : b,
                  undefined,
                )
              ).find((c) => c !== undefined);
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

Deno.test("an honest address with two connections in flight is never cut while each is accepted and answered within MAX_CONNECTIONS - 1 accepts, against attacker addresses of one to five connections each, hot, stalled, silent or churned", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 3, max: 12 }),
      fc.array(_step, { maxLength: 300, size: "max" }),
      fc.array(fc.nat(40), { minLength: 1, maxLength: 20 }),
      fc.tuple(fc.nat(40), fc.nat(40)),
      fc.integer({ min: 1, max: 5 }),
      (max, steps, delays, from, most) => {
        const slots = new FairSlots<string>();
        const attacker: { slot: Slot<string>; hot: boolean; from: string }[] =
          [];
        const held = new Map<string, number>();
        type Lane = {
          slot: Slot<string>;
          phase: number;
          wait: number;
          acceptsSince: number;
        };
        const lanes: (Lane | null)[] = [null, null];
        let served = 0;
        let serial = 0;
        const accepted = () => {
          for (const lane of lanes) if (lane) lane.acceptsSince++;
        };
        const open = (address: string, name: string): Slot<string> | null => {
          if (slots.size >= max) {
            const room = slots.makeRoomFor(address);
            if (room === undefined) return null;
            const lane = lanes.findIndex((l) => l?.slot.connection === room);
            if (lane >= 0) {
              assert.ok(
                lanes[lane]!.acceptsSince >= max - 1,
                `an honest connection was cut after ${
                  lanes[lane]!.acceptsSince
                } accepts`,
              );
              lanes[lane]!.slot.release();
              lanes[lane] = null;
            } else {
              const index = attacker.findIndex((a) =>
                a.slot.connection === room
              );
              const [gone] = attacker.splice(index, 1);
              gone.slot.release();
              held.set(gone.from, held.get(gone.from)! - 1);
            }
          }
          const slot = slots.add(address, name);
          accepted();
          return slot;
        };
        steps.forEach((step, index) => {
          lanes.forEach((lane, n) => {
            if (lane === null && index >= from[n]) {
              const slot = open("honest", `honest ${serial++}`);
              assert.ok(slot, "an honest second connection was refused");
              lanes[n] = {
                slot,
                phase: 0,
                wait: delays[served++ % delays.length],
                acceptsSince: 0,
              };
              return;
            }
            if (lane !== null && lane.wait-- === 0) {
              if (lane.phase === 0) {
                lane.slot.busy(true);
                lane.phase = 1;
                lane.wait = delays[served++ % delays.length];
              } else {
                lane.slot.busy(false);
                lane.slot.release();
                lanes[n] = null;
              }
            }
          });
          const hotAnswered = step.kind !== "open" && step.hotAnswered;
          for (const a of attacker) {
            if (!a.hot) continue;
            a.slot.busy(false);
            if (!hotAnswered) a.slot.busy(true);
          }
          if (step.kind === "open") {
            const from = `attacker ${step.address}`;
            // Attacker addresses hold up to `most` connections each.
            if ((held.get(from) ?? 0) >= most) return;
            const slot = open(from, `a${serial++}`);
            if (slot === null) return;
            held.set(from, (held.get(from) ?? 0) + 1);
            attacker.push({ slot, hot: step.as === "hot", from });
            if (step.as !== "silent") slot.busy(true);
          } else if (attacker.length > 0) {
            const index = step.pick % attacker.length;
            const a = attacker[index];
            if (step.kind === "close") {
              a.slot.release();
              attacker.splice(index, 1);
              held.set(a.from, held.get(a.from)! - 1);
            } else a.slot.busy(step.kind === "busy");
          }
        });
      },
    ),
    { numRuns: 2000 },
  );
});
