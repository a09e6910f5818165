import assert from "node:assert/strict";
import { Coalesced } from "../../lib/util/coalesce.ts";

/** A read the test finishes by hand, counting how many were started. */
function manualReads() {
  const pending: ((value: number) => void)[] = [];
  let started = 0;
  const read = () =>
    new Promise<number>((resolve) => {
      started++;
      pending.push(resolve);
    });
  return { read, pending, started: () => started };
}

Deno.test("callers waiting together share one read", async () => {
  const m = manualReads();
  const c = new Coalesced(m.read);
  const first = c.get(); // starts read 1
  const [a, b, d] = [c.get(), c.get(), c.get()]; // all wait for read 2
  assert.equal(m.started(), 1);
  m.pending[0](1);
  assert.equal(await first, 1);
  await Promise.resolve();
  assert.equal(m.started(), 2, "one second read for the three waiting");
  m.pending[1](2);
  assert.deepEqual(await Promise.all([a, b, d]), [2, 2, 2]);
});

Deno.test("a caller never gets a read that started before it asked", async () => {
  const m = manualReads();
  const c = new Coalesced(m.read);
  const early = c.get(); // read 1 starts: it may predate a change
  const late = c.get(); // asked after read 1 started
  m.pending[0](10);
  assert.equal(await early, 10);
  await Promise.resolve();
  m.pending[1](11);
  assert.equal(
    await late,
    11,
    "the late caller got the read that started after it",
  );
});

Deno.test("a lone caller is served at once, with no timer", async () => {
  const m = manualReads();
  const c = new Coalesced(m.read);
  const value = c.get();
  assert.equal(m.started(), 1);
  m.pending[0](7);
  assert.equal(await value, 7);
  const again = c.get();
  assert.equal(m.started(), 2, "the next caller starts a fresh read at once");
  m.pending[1](8);
  assert.equal(await again, 8);
});

Deno.test("a failed read fails its callers, and the next read still runs", async () => {
  let calls = 0;
  const c = new Coalesced(() =>
    ++calls === 1 ? Promise.reject(new Error("down")) : Promise.resolve(5)
  );
  await assert.rejects(c.get(), /down/);
  assert.equal(await c.get(), 5);
});
