import assert from "node:assert/strict";
import { FairSlots, slotAddress } from "../../lib/server/fair_slots.ts";

Deno.test("at the cap a newcomer from a lighter address takes the heaviest address's longest-quiet idle connection, else its oldest", () => {
  const slots = new FairSlots<string>();
  const a = ["a0", "a1", "a2"].map((name) => slots.add("A", name));
  slots.add("B", "b0");
  for (const slot of a) slot.busy(true);
  a[2].busy(false);
  a[1].busy(false);
  assert.equal(slots.makeRoomFor("B"), "a2", "idle longest first");
  assert.equal(slots.makeRoomFor("C"), "a2");
  a[2].busy(true);
  a[1].busy(true);
  assert.equal(slots.makeRoomFor("C"), "a0", "all busy: the oldest");
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
  assert.equal(slots.makeRoomFor("C"), "b0", "now lighter than A and B");
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
