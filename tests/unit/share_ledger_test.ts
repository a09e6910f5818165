/**
 * Rate-limit shares lent between servers (lib/auth/share_ledger.ts),
 * against a model: two to four servers on one in-memory store, each with
 * its own limiter and ledger, on one scripted clock; one key line's
 * requests spread over them at random, each server polling at its own
 * random phase and jitter, each store call answering after a random time,
 * one server perhaps frozen: thawed within the wait, or lapsed (its share
 * taken back) and registered afresh under a new id. Whatever the traffic,
 * no window accepts more than the limit, and a request is refused only if
 * at some moment of its life the installation's window was full (the one
 * exception: requests the frozen server itself held when it stopped).
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import {
  lineCounter,
  lineLimit,
  RateLimiter,
} from "../../lib/auth/rate_limit.ts";
import { shareOf } from "../../lib/auth/peers.ts";
import {
  refusal,
  ShareLedger,
  shareWaitMs,
} from "../../lib/auth/share_ledger.ts";
import { PEERS_POLL_MS } from "../../lib/auth/peers.ts";
import { LEASE_MARGIN_MS, LEASE_MS } from "../../lib/store/registrations.ts";
import {
  readShares,
  type ShareRecord,
  type ShareStore,
  sumOf,
} from "../../lib/store/rate_shares.ts";
import { ShareEntries } from "../../lib/store/layout/_shares.ts";
import type { Entries } from "../../lib/store/entries.ts";
import type { RateLimit } from "../../lib/store/types.ts";
import { StoreUnavailableError } from "../../lib/store/errors.ts";

const POLL_MS = 100;
const WAIT_MS = shareWaitMs(POLL_MS);
/**
 * A silent server's registration lapses: a lease, its margin and a listing
 * of the servers after its last renewal (LEASE_MS + LEASE_MARGIN_MS and up
 * to two listings of PEERS_POLL_MS), under the wait.
 */
const LAPSE_MS = LEASE_MS + LEASE_MARGIN_MS + PEERS_POLL_MS;
const COUNTER = 7;

/** A scripted clock whose timers run, in time order, only when it is moved. */
class Clock {
  ms = 0;
  #timers: { at: number; seq: number; run: () => void }[] = [];
  #seq = 0;

  set = (run: () => void, ms: number): () => void => {
    const timer = { at: this.ms + ms, seq: this.#seq++, run };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  };

  /** Runs every timer due up to `to`, letting each one's promises settle. */
  async moveTo(to: number): Promise<void> {
    for (;;) {
      this.#timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const next = this.#timers[0];
      if (next === undefined || next.at > to) break;
      this.#timers.shift();
      this.ms = Math.max(this.ms, next.at);
      next.run();
      await settle();
    }
    this.ms = Math.max(this.ms, to);
    await settle();
  }
}

/**
 * Lets every promise chain on the in-memory store run to its end: the
 * store answers only by the clock's timers, so only promise jobs are
 * pending, and a message posted after them is delivered once they all ran
 * (a timer of 0 ms would do, but nested ones are held back 4 ms each).
 */
function settle(): Promise<void> {
  const { port1, port2 } = new MessageChannel();
  return new Promise((resolve) => {
    port1.onmessage = () => {
      port1.close();
      resolve();
    };
    port2.postMessage(null);
  });
}

/**
 * The store as a model: a map of records under increasing versions. Each
 * call takes effect when made and answers after `delay()` ms on the clock,
 * so requests and other servers' calls land in between.
 */
class ModelShares implements ShareStore {
  entries = new Map<number, { record: ShareRecord; version: string }>();
  #version = 0;
  #clock: Clock | null;
  #delay: () => number;

  constructor(clock: Clock | null = null, delay: () => number = () => 0) {
    this.#clock = clock;
    this.#delay = delay;
  }

  #answer<T>(value: T): Promise<T> {
    if (this.#clock === null) return Promise.resolve(value);
    const { promise, resolve } = Promise.withResolvers<T>();
    this.#clock.set(() => resolve(value), this.#delay());
    return promise;
  }

  list() {
    return this.#answer(
      [...this.entries].map(([counter, { record, version }]) => ({
        counter,
        version,
        record: readShares(structuredClone(record)),
      })),
    );
  }

  get(counter: number) {
    const entry = this.entries.get(counter);
    return this.#answer({
      version: entry?.version ?? null,
      record: entry ? readShares(structuredClone(entry.record)) : null,
    });
  }

  put(counter: number, record: ShareRecord | null, version: string | null) {
    const entry = this.entries.get(counter);
    if ((entry?.version ?? null) !== version) {
      return this.#answer({ ok: false, version });
    }
    // What every commit keeps, checked where it is written.
    if (record !== null) assert.ok(sumOf(record.shares) <= record.limit);
    if (record === null) {
      this.entries.delete(counter);
      return this.#answer({ ok: true, version: null });
    }
    const next = String(++this.#version).padStart(12, "0");
    this.entries.set(counter, {
      record: structuredClone(record),
      version: next,
    });
    return this.#answer({ ok: true, version: next });
  }
}

interface Server {
  /** Its registration id: a new one once it registers afresh. */
  id: string;
  /** Whether it holds its lease. */
  held: boolean;
  /** Its registration found removed, before it registers afresh: no id. */
  removed?: boolean;
  limiter: RateLimiter;
  ledger: ShareLedger;
}

/** The registrations as the servers see them; a test removes one. */
interface Membership {
  live: string[];
  /** The registrations in the store now, when the servers' listing is older. */
  registered?: string[];
}

function installation(
  count: number,
  clock: Clock,
  store: ShareStore,
  membership: Membership = { live: [] },
) {
  const ids = Array.from({ length: count }, (_, i) => `server-${i}`).sort();
  membership.live = [...ids];
  return ids.map((id) => {
    const limiter = new RateLimiter({ now: () => clock.ms });
    const server = { id, held: true, limiter } as Server;
    const live = () =>
      membership.live.includes(server.id)
        ? membership.live
        : [...membership.live, server.id].sort();
    server.ledger = new ShareLedger(store, {
      self: () => server.removed ? null : server.id,
      held: () => server.held,
      peers: {
        // As Peers counts them: this one among the listed, listed or not.
        get count() {
          return live().length;
        },
        get live() {
          return live();
        },
        share(limit: RateLimit, keyId: number) {
          return shareOf(limit, {
            rank: live().indexOf(server.id),
            count: live().length,
            keyId,
          });
        },
      },
      used: (counter) => limiter.used(counter),
      frees: (counter, share) => limiter.freesInMs(counter, share),
      registered: () =>
        Promise.resolve([...(membership.registered ?? membership.live)]),
      waitMs: () => WAIT_MS,
      now: () => clock.ms,
      setTimer: clock.set,
    });
    return server;
  });
}

/** What the API-key step does with one request of the line (authenticate.ts). */
function send(
  server: Server,
  limit: RateLimit,
  clock: Clock,
): Promise<number | null> {
  const take = () =>
    server.limiter.take(COUNTER, limit, {
      share: server.ledger.place(limit, COUNTER).share,
    }).ok;
  if (take()) return Promise.resolve(clock.ms);
  return server.ledger.wait(COUNTER, limit, take).then((accepted) =>
    accepted || take() ? clock.ms : null
  );
}

/** Accepted requests in (at − window, at]. */
function inWindow(accepted: number[], at: number, windowMs: number): number {
  return accepted.filter((t) => t > at - windowMs && t <= at).length;
}

const traffic = fc.record({
  servers: fc.integer({ min: 2, max: 4 }),
  limit: fc.integer({ min: 1, max: 12 }),
  windowMs: fc.constantFrom(1000, 2000),
  /** Each server's poll phase and per-poll jitter. */
  phases: fc.array(fc.integer({ min: 0, max: POLL_MS - 1 }), {
    minLength: 4,
    maxLength: 4,
  }),
  jitter: fc.array(fc.integer({ min: 0, max: 60 }), { maxLength: 64 }),
  /** Each store call's time to answer, in turn. */
  latency: fc.array(fc.integer({ min: 0, max: 40 }), { maxLength: 32 }),
  /**
   * A server stopped (SIGSTOP) for a while: no polls, no requests. Past
   * LAPSE_MS its registration lapses and is removed; thawed, it registers
   * afresh under a new id.
   */
  freeze: fc.option(
    fc.record({
      server: fc.nat(3),
      from: fc.nat(6000),
      length: fc.oneof(
        fc.integer({ min: 100, max: 4000 }),
        fc.integer({ min: LAPSE_MS, max: 9000 }),
      ),
    }),
  ),
  requests: fc.array(
    fc.record({
      server: fc.nat(3),
      gap: fc.oneof(
        fc.constant(0),
        fc.integer({ min: 1, max: 150 }),
        fc.integer({ min: 500, max: 2500 }),
      ),
    }),
    { minLength: 1, maxLength: 60 },
  ),
});

Deno.test("model: servers lending shares never accept more than the limit in any window, one of them frozen (thawed within the wait, or lapsed and registered afresh) or not, and refuse a request only if the installation's window was full at some moment of its wait", async () => {
  await fc.assert(
    fc.asyncProperty(traffic, async (run) => {
      const clock = new Clock();
      let calls = 0;
      const store = new ModelShares(
        clock,
        () => run.latency[calls++ % Math.max(1, run.latency.length)] ?? 0,
      );
      const membership: Membership = { live: [] };
      const servers = installation(run.servers, clock, store, membership);
      const limit = { count: run.limit, windowSeconds: run.windowMs / 1000 };
      // Every server polls on its own phase, each poll a little late at
      // random, but always well within the wait.
      let jitters = 0;
      const freeze = run.freeze && {
        server: run.freeze.server % run.servers,
        from: run.freeze.from,
        to: run.freeze.from + run.freeze.length,
      };
      const frozen = (i: number) =>
        freeze !== null && freeze.server === i && clock.ms >= freeze.from &&
        clock.ms < freeze.to;
      if (freeze !== null && freeze.to - freeze.from >= LAPSE_MS) {
        const server = servers[freeze.server];
        const others = () => membership.live.filter((id) => id !== server.id);
        // Removed once its lease has ended. Thawed, it finds that out (the
        // read a request without a lease waits for), then registers afresh.
        clock.set(() => {
          server.held = false;
          membership.live = others();
          membership.registered = membership.live;
        }, freeze.from + LAPSE_MS);
        clock.set(() => server.removed = true, freeze.to);
        clock.set(() => {
          server.removed = false;
          server.id = `${server.id}-thawed`;
          server.held = true;
          membership.live = [...others(), server.id].sort();
          membership.registered = membership.live;
        }, freeze.to + POLL_MS / 2);
      }
      servers.forEach((server, i) => {
        const poll = () => {
          if (!frozen(i)) server.ledger.poll();
          const late = run.jitter[jitters++ % Math.max(1, run.jitter.length)];
          clock.set(poll, POLL_MS + (late ?? 0));
        };
        clock.set(poll, run.phases[i]);
      });
      const accepted: number[] = [];
      const outcomes: Promise<void>[] = [];
      const refused: { sent: number; answered: number; by: number }[] = [];
      const unavailable: { by: number; leased: boolean }[] = [];
      let at = 0;
      for (const request of run.requests) {
        at += request.gap;
        await clock.moveTo(at);
        const sent = clock.ms;
        if (frozen(request.server % servers.length)) continue;
        const by = request.server % servers.length;
        const server = servers[by];
        outcomes.push(
          send(server, limit, clock).then((time) => {
            if (time === null) refused.push({ sent, answered: clock.ms, by });
            else accepted.push(time);
          }, (error) => {
            // The outage's 503: only a server out of its lease says it.
            assert.ok(error instanceof StoreUnavailableError, String(error));
            const leased = server.held && !server.removed;
            unavailable.push({ by, leased });
          }),
        );
        await settle();
        // Never more than the limit granted at once, whoever holds it (a
        // frozen server runs nothing, so grants nothing).
        const granted = servers.filter((_, i) => !frozen(i)).reduce(
          (sum, s) => sum + s.ledger.place(limit, COUNTER).share,
          0,
        );
        assert.ok(granted <= run.limit, `granted ${granted}`);
      }
      await clock.moveTo(at + WAIT_MS + POLL_MS);
      await Promise.all(outcomes);
      for (const t of accepted) {
        const seen = inWindow(accepted, t, run.windowMs);
        assert.ok(seen <= run.limit, `${seen} accepted in the window to ${t}`);
      }
      for (const { by, leased } of unavailable) {
        assert.ok(!leased && freeze?.server === by, "503 only without a lease");
      }
      for (const { sent, answered, by } of refused) {
        assert.ok(answered - sent <= WAIT_MS, "waited no longer than stated");
        // A request the frozen server itself held when it stopped answers
        // nothing until it thaws; any other refusal must be honest, with a
        // lender frozen for less than the wait or lapsed.
        const caught = freeze !== null && by === freeze.server &&
          sent < freeze.to && answered >= freeze.from;
        if (caught) continue;
        const moments = [sent, ...accepted.filter((t) => t > sent)]
          .filter((t) => t <= answered);
        const full = moments.some((t) =>
          inWindow(accepted, t, run.windowMs) >= run.limit
        );
        assert.ok(
          full,
          `refused at ${answered} (sent ${sent}) with the window never full`,
        );
      }
    }),
    { numRuns: 500 },
  );
});

Deno.test("a server whose requests all land on it gets the whole limit once the others lend, and the others then get none", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const [a, b] = installation(2, clock, store);
  const limit = { count: 10, windowSeconds: 60 };
  const poll = () => {
    a.ledger.poll();
    b.ledger.poll();
    clock.set(poll, POLL_MS);
  };
  clock.set(poll, POLL_MS);
  const answers: (number | null)[] = [];
  for (let i = 0; i < 11; i++) {
    answers.push(await settled(send(a, limit, clock), clock));
  }
  assert.equal(answers.filter((t) => t !== null).length, 10);
  assert.equal(answers[10], null);
  assert.equal(await settled(send(b, limit, clock), clock), null);
});

/** Moves the clock 10 ms at a time until `answer` settles (at most the wait), then gives it. */
async function settled<T>(answer: Promise<T>, clock: Clock): Promise<T> {
  let done = false;
  const end = () => done = true;
  answer.then(end, end);
  const until = clock.ms + WAIT_MS + POLL_MS;
  await settle();
  while (!done && clock.ms < until) await clock.moveTo(clock.ms + 10);
  return answer;
}

/** Polls each of `servers()` every POLL_MS, as their leases would. */
function polling(clock: Clock, servers: () => Server[]): void {
  const poll = () => {
    for (const server of servers()) server.ledger.poll();
    clock.set(poll, POLL_MS);
  };
  clock.set(poll, POLL_MS);
}

/** One request sent now, and when it was answered. */
function timed(server: Server, limit: RateLimit, clock: Clock) {
  const sent = clock.ms;
  return send(server, limit, clock).then((at) => ({
    accepted: at !== null,
    heldMs: clock.ms - sent,
  }));
}

Deno.test("a frozen lender: the request past the borrower's share is held, not refused, and accepted once the frozen server's registration has lapsed", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const membership: Membership = { live: [] };
  const [a, b] = installation(2, clock, store, membership);
  const limit = { count: 10, windowSeconds: 60 };
  // Only `a` polls: `b` is stopped (SIGSTOP) and never sees the want.
  polling(clock, () => [a]);
  for (let i = 0; i < 5; i++) {
    assert.notEqual(await send(a, limit, clock), null);
  }
  const sixth = timed(a, limit, clock);
  await clock.moveTo(clock.ms + LAPSE_MS);
  // Its lease lapsed and a listing removed its registration.
  membership.live = [a.id];
  membership.registered = [a.id];
  await clock.moveTo(clock.ms + WAIT_MS);
  const answer = await sixth;
  assert.ok(answer.accepted, "an honest request is not refused");
  assert.ok(answer.heldMs < LAPSE_MS + 3 * POLL_MS, `${answer.heldMs} ms`);
  // Ten accepted here in all, the frozen server's own none: the limit.
  for (let i = 0; i < 4; i++) {
    assert.notEqual(await send(a, limit, clock), null);
  }
  const last = timed(a, limit, clock);
  await clock.moveTo(clock.ms + WAIT_MS + 1);
  assert.equal((await last).accepted, false, "the limit still holds");
  void b;
});

Deno.test("a borrower killed (SIGKILL) holding the whole limit: its client, moving to the lender, is held and accepted once the dead one's registration has lapsed", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const membership: Membership = { live: [] };
  const [a, b] = installation(2, clock, store, membership);
  const limit = { count: 10, windowSeconds: 60 };
  let alive = [a, b];
  polling(clock, () => alive);
  // Six on b: past its five it wants a whole even share, and claims it.
  for (let i = 0; i < 6; i++) {
    assert.ok((await settled(timed(b, limit, clock), clock)).accepted);
  }
  assert.equal(store.entries.get(COUNTER)?.record.shares[b.id], 10);
  // b dies; its registration stays until it lapses.
  alive = [a];
  const moved = timed(a, limit, clock);
  await clock.moveTo(clock.ms + LAPSE_MS);
  membership.live = [a.id];
  membership.registered = [a.id];
  await clock.moveTo(clock.ms + WAIT_MS);
  const answer = await moved;
  assert.ok(answer.accepted, "the client at the lender is not refused");
  assert.ok(answer.heldMs < LAPSE_MS + 3 * POLL_MS, `${answer.heldMs} ms`);
});

Deno.test("every server holding part of the share answers it has no room: the request past the share gets 429 at once, with Retry-After when the first of them frees (± 1 s), and the next one is not held at all", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const [a, b] = installation(2, clock, store);
  const limit = { count: 10, windowSeconds: 60 };
  polling(clock, () => [a, b]);
  // b's five at 0 s, a's five at 10 s: b frees at 60 s, a at 70 s.
  for (let i = 0; i < 5; i++) {
    assert.notEqual(await send(b, limit, clock), null);
  }
  await clock.moveTo(10_000);
  for (let i = 0; i < 5; i++) {
    assert.notEqual(await send(a, limit, clock), null);
  }
  await clock.moveTo(20_000);
  const answer = await settled(timed(a, limit, clock), clock);
  assert.equal(answer.accepted, false);
  // b answers at its next poll, a hears at its next (or one more when
  // their commits cross): not the wait of seconds.
  assert.ok(answer.heldMs <= 3 * POLL_MS, `held ${answer.heldMs} ms`);
  const own = a.limiter.take(COUNTER, limit, a.ledger.place(limit, COUNTER));
  const told = refusal(own, a.ledger.freesInMs(COUNTER));
  assert.equal(own.retryAfterSeconds, 50, "a's own frees at 70 s");
  assert.ok(
    Math.abs(told.retryAfterSeconds - 40) <= 1,
    `Retry-After ${told.retryAfterSeconds}, b frees in 40 s`,
  );
  assert.equal(told.resetSeconds, told.retryAfterSeconds);
  const twelfth = await settled(timed(a, limit, clock), clock);
  assert.deepEqual(twelfth, { accepted: false, heldMs: 0 });
  // Once b's first leaves its window, b lends it, and a's client gets it.
  await clock.moveTo(60_000);
  const lent = await settled(timed(a, limit, clock), clock);
  assert.ok(lent.accepted, "accepted once b has room");
  assert.ok(lent.heldMs <= 3 * POLL_MS, `held ${lent.heldMs} ms`);
});

Deno.test("a frozen server thawed after its registration lapsed and its share was taken: registered afresh, it accepts none of the key in that window, before or after it lists the records", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const membership: Membership = { live: [] };
  const [a, b] = installation(2, clock, store, membership);
  const limit = { count: 10, windowSeconds: 60 };
  let alive = [a];
  polling(clock, () => alive);
  const accepted: number[] = [];
  const count = async (server: Server) => {
    if ((await settled(timed(server, limit, clock), clock)).accepted) {
      accepted.push(clock.ms);
    }
  };
  // b is frozen from the start: a's client gets a's five, then b's five
  // once b's registration lapses.
  for (let i = 0; i < 5; i++) await count(a);
  const sixth = timed(a, limit, clock);
  await clock.moveTo(clock.ms + LAPSE_MS);
  membership.live = [a.id];
  membership.registered = [a.id];
  await clock.moveTo(clock.ms + WAIT_MS);
  assert.ok((await sixth).accepted);
  for (let i = 0; i < 4; i++) await count(a);
  assert.equal(accepted.length + 1, 10);
  // b thaws: its lease ran out, so it holds none, as its old self (held
  // through the wait without its lease back, it answers the outage)...
  b.held = false;
  await assert.rejects(
    settled(timed(b, limit, clock), clock),
    StoreUnavailableError,
  );
  // ...registered afresh, with a lease, before its first listing...
  b.id = "server-9";
  b.held = true;
  membership.live = [a.id, b.id];
  membership.registered = [a.id, b.id];
  await count(b);
  // ...and polling again, as the key's other clients keep calling.
  alive = [a, b];
  for (let i = 0; i < 3; i++) {
    await count(b);
    await count(a);
  }
  assert.equal(accepted.length + 1, 10, "no window over the limit");
});

Deno.test("a server that borrowed more than it used stops: a request past the other's share takes the stopped one's share at once, not after the next listing of the servers", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const membership: Membership = { live: [] };
  const [a, b] = installation(2, clock, store, membership);
  const limit = { count: 10, windowSeconds: 60 };
  let polling = [a, b];
  const poll = () => {
    for (const server of polling) server.ledger.poll();
    clock.set(poll, POLL_MS);
  };
  clock.set(poll, POLL_MS);
  // Six on b: past its five it wants a whole even share, and claims it.
  for (let i = 0; i < 6; i++) {
    const answer = send(b, limit, clock);
    await clock.moveTo(clock.ms + WAIT_MS + 1);
    assert.notEqual(await answer, null);
  }
  assert.equal(store.entries.get(COUNTER)?.record.shares[b.id], 10);
  // b stops (SIGTERM): its registration is removed at once, while a's
  // listing of the servers (once a second) still shows it.
  polling = [a];
  membership.registered = [a.id];
  const sent = clock.ms;
  let answered = -1;
  const seventh = send(a, limit, clock).then((t) => {
    answered = clock.ms;
    return t;
  });
  await clock.moveTo(sent + WAIT_MS + 1);
  assert.notEqual(await seventh, null, "an honest request is not refused");
  assert.ok(answered - sent < WAIT_MS, `${answered - sent} ms`);
});

Deno.test("a server whose lease lapses for a moment (the store slow to take its renewal) holds a request of a lent key until the lease is back, rather than answering 429 with the whole window to wait", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const ids = ["server-0", "server-1"];
  // This server borrowed the whole limit earlier.
  store.entries.set(COUNTER, {
    record: {
      limit: 10,
      window: 60,
      shares: { [ids[0]]: 10 },
      wants: {},
      answers: {},
    },
    version: "seed",
  });
  let held = true;
  const limiter = new RateLimiter({ now: () => clock.ms });
  const ledger = new ShareLedger(store, {
    self: () => ids[0],
    held: () => held,
    peers: { count: 2, live: ids, share: () => 5 },
    used: (counter) => limiter.used(counter),
    frees: (counter, share) => limiter.freesInMs(counter, share),
    registered: () => Promise.resolve(ids),
    waitMs: () => WAIT_MS,
    now: () => clock.ms,
    setTimer: clock.set,
  });
  const server = { id: ids[0], held, limiter, ledger };
  const limit = { count: 10, windowSeconds: 60 };
  await ledger.poll();
  for (let i = 0; i < 6; i++) {
    assert.notEqual(await send(server, limit, clock), null);
  }
  held = false;
  const sent = clock.ms;
  const seventh = send(server, limit, clock);
  await clock.moveTo(sent + POLL_MS);
  // The renewal commits; the lease's poll follows.
  held = true;
  await ledger.poll();
  await clock.moveTo(sent + WAIT_MS + 1);
  assert.equal(
    await seventh,
    sent + POLL_MS,
    "accepted once the lease is back",
  );
});

Deno.test("share records on a store's entries: written only over the version read, unreadable ones read as null", async () => {
  const kv = await Deno.openKv(":memory:");
  try {
    const shares = new ShareEntries(kv as unknown as Entries);
    const record = {
      limit: 4,
      window: 60,
      shares: { a: 2, b: 2 },
      wants: {},
      answers: {},
    };
    const first = await shares.put(1, record, null);
    assert.ok(first.ok);
    assert.equal((await shares.put(1, record, null)).ok, false);
    assert.deepEqual((await shares.get(1)).record, record);
    const moved = { ...record, shares: { a: 3, b: 1 } };
    const second = await shares.put(1, moved, first.version);
    assert.ok(second.ok);
    assert.equal((await shares.put(1, record, first.version)).ok, false);
    await kv.atomic().set(["rate_shares", 2], { limit: 1 }).commit();
    await kv.atomic().set(["rate_shares", 3], {
      ...record,
      shares: { a: 3, b: 2 },
    }).commit();
    assert.deepEqual(
      (await shares.list()).map(({ counter, record }) => [counter, record]),
      [[1, moved], [2, null], [3, null]],
    );
    assert.ok((await shares.put(1, null, second.version)).ok);
    assert.equal((await shares.get(1)).record, null);
  } finally {
    kv.close();
  }
});

/**
 * One request of key `id` (of the line whose first key is `root`, or none)
 * on `server`, as the API-key step takes it (authenticate.ts `take`/`held`):
 * both counts, each counter waited on at most once, one retry after.
 */
async function sendKey(
  server: Server,
  { id, root, limit }: { id: number; root: number | null; limit: RateLimit },
  clock: Clock,
): Promise<boolean> {
  const { ledger, limiter } = server;
  const take = () =>
    root === null
      ? limiter.take(id, limit, ledger.place(limit, id))
      : limiter.take(id, limit, {
        ...ledger.place(limit, id),
        line: {
          root,
          ...ledger.place(lineLimit(limit), lineCounter(root)),
        },
      });
  let last = take();
  const waited = new Set<number>();
  while (!last.ok) {
    const line = root !== null && last.lineFull === true;
    const counter = line ? lineCounter(root) : id;
    if (waited.has(counter)) break;
    waited.add(counter);
    const counted = line ? lineLimit(limit) : limit;
    const accepted = await settled(
      ledger.wait(counter, counted, () => (last = take()).ok),
      clock,
    );
    if (!accepted) last = take();
  }
  return last.ok;
}

Deno.test("a rotation line on two servers: the first key used up on one, three chained successors on the other, accepts at most 2L in the window (the first server's line share counts its first key's log before any line key reached it)", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const [a, b] = installation(2, clock, store);
  polling(clock, () => [a, b]);
  const limit = { count: 5, windowSeconds: 60 };
  const untilRefused = async (
    server: Server,
    id: number,
    root: number | null,
  ) => {
    let accepted = 0;
    while (accepted < 20 && await sendKey(server, { id, root, limit }, clock)) {
      accepted++;
      await clock.moveTo(clock.ms + 10);
    }
    return accepted;
  };
  // K1 (id 1) before any rotation, on a: its whole 5, a borrowing b's share.
  const counts = [await untilRefused(a, 1, null)];
  assert.equal(counts[0], 5);
  // Then rotated three times, each new key (ids 2 to 4, line of 1) on b.
  for (const id of [2, 3, 4]) counts.push(await untilRefused(b, id, 1));
  const total = counts.reduce((sum, n) => sum + n, 0);
  assert.ok(clock.ms < 60_000, "all within one window");
  assert.ok(total <= 2 * limit.count, `accepted ${counts.join(" + ")}`);
  // a never lent the line room its first key had used.
  assert.equal(a.limiter.used(lineCounter(1)), 5);
});

Deno.test("a request held past the share while this server has no lease through the whole wait (the store paused) ends in the store's outage, StoreUnavailableError, not a refusal", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const [a, b] = installation(2, clock, store);
  polling(clock, () => [a, b]);
  const limit = { count: 10, windowSeconds: 60 };
  for (let i = 0; i < 5; i++) {
    assert.notEqual(await settled(send(a, limit, clock), clock), null);
  }
  // The store stops answering: no poll, no renewal; the lease ends within
  // the wait, and stays gone to its end.
  store.put = () => new Promise(() => {});
  store.list = () => new Promise(() => {});
  store.get = () => new Promise(() => {});
  const sent = clock.ms;
  const seen: { outcome: unknown } = { outcome: "pending" };
  send(a, limit, clock).then(
    (at) => seen.outcome = at,
    (error) => seen.outcome = error,
  );
  await clock.moveTo(sent + 1000);
  a.held = false;
  await clock.moveTo(sent + WAIT_MS - 1);
  assert.equal(seen.outcome, "pending", "held through the wait");
  await clock.moveTo(sent + WAIT_MS + 1);
  const outcome: unknown = seen.outcome;
  assert.ok(outcome instanceof StoreUnavailableError, String(outcome));
  assert.equal(outcome.code, "store_unavailable");
});

Deno.test("a request held past the share whose lease is back before the wait ends is judged as before: no outage", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const [a, b] = installation(2, clock, store);
  polling(clock, () => [a]);
  const limit = { count: 10, windowSeconds: 60 };
  for (let i = 0; i < 5; i++) {
    assert.notEqual(await settled(send(a, limit, clock), clock), null);
  }
  // b is silent (frozen) and a's lease lapses for a while, then is back.
  a.held = false;
  const answer = timed(a, limit, clock);
  await clock.moveTo(clock.ms + 2 * POLL_MS);
  a.held = true;
  await clock.moveTo(clock.ms + WAIT_MS + POLL_MS);
  assert.equal((await answer).accepted, false, "b never answered or lapsed");
  void b;
});

Deno.test("three servers, all at their shares, each asked past its share in turn: from the second round on, every request past the limit is refused at once, without a store write (one server's new want no longer clears the answers the others rely on)", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const servers = installation(3, clock, store);
  polling(clock, () => servers);
  const limit = { count: 6, windowSeconds: 60 };
  for (const server of servers) {
    for (let i = 0; i < 2; i++) {
      assert.notEqual(await settled(send(server, limit, clock), clock), null);
      await clock.moveTo(clock.ms + 1000);
    }
  }
  const heldMs: number[] = [];
  for (const server of servers) {
    const first = await settled(timed(server, limit, clock), clock);
    assert.equal(first.accepted, false);
    heldMs.push(first.heldMs);
    await clock.moveTo(clock.ms + 3 * POLL_MS);
  }
  assert.ok(Math.max(...heldMs) <= 4 * POLL_MS, `first round ${heldMs}`);
  let writes = 0;
  const put = store.put.bind(store);
  store.put = (...args) => {
    writes++;
    return put(...args);
  };
  for (let round = 2; round <= 3; round++) {
    for (const server of servers) {
      const before = writes;
      const again = await settled(timed(server, limit, clock), clock);
      assert.deepEqual(again, { accepted: false, heldMs: 0 }, `round ${round}`);
      assert.equal(writes, before, `round ${round}: no store write`);
      await clock.moveTo(clock.ms + 3 * POLL_MS);
    }
  }
  // Once the first requests leave the window, a client is lent room again.
  await clock.moveTo(62_000);
  const lent = await settled(timed(servers[0], limit, clock), clock);
  assert.ok(lent.accepted, "accepted once another server has room");
});

Deno.test("three servers polling out of step, each asked past its share right after the one before was refused: from the second round on every request is refused at once, without a store write, though a server's view may lack the answer given after its last poll", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const servers = installation(3, clock, store);
  // Each polls every POLL_MS at its own phase, as real leases do, so a
  // server's view may miss the answer another committed since it polled.
  servers.forEach((server, rank) => {
    const poll = () => {
      server.ledger.poll();
      clock.set(poll, POLL_MS);
    };
    clock.set(poll, 1 + Math.floor((rank * POLL_MS) / servers.length));
  });
  const limit = { count: 6, windowSeconds: 60 };
  for (const server of servers) {
    for (let i = 0; i < 2; i++) {
      assert.notEqual(await settled(send(server, limit, clock), clock), null);
    }
  }
  for (const server of servers) {
    assert.equal(
      (await settled(timed(server, limit, clock), clock)).accepted,
      false,
    );
  }
  let writes = 0;
  const put = store.put.bind(store);
  store.put = (...args) => {
    // A poll taking back its own want, left by its refused request, is no
    // answer to anyone: only a want or an answer written counts.
    const [, record] = args;
    const wants = Object.keys(record?.wants ?? {}).length;
    const entry = store.entries.get(COUNTER)?.record;
    if (entry === undefined || wants >= Object.keys(entry.wants).length) {
      writes++;
    }
    return put(...args);
  };
  const heldMs: number[] = [];
  for (let round = 2; round <= 4; round++) {
    for (const server of servers) {
      const again = await settled(timed(server, limit, clock), clock);
      assert.equal(again.accepted, false, `round ${round}`);
      heldMs.push(again.heldMs);
    }
  }
  assert.deepEqual(heldMs, heldMs.map(() => 0), `held ${heldMs}`);
  assert.equal(writes, 0, "no want or answer written after the first round");
});

Deno.test("refuses (asked by a line key past both counts before it borrows its own): true only while every other holder's answer holds, by the record read afresh when the server's view lacks the answers; false before any answer and once they run out; it writes nothing and holds nothing", async () => {
  const clock = new Clock();
  const store = new ModelShares();
  const servers = installation(3, clock, store);
  // Out of step, as real leases poll: a view may miss a newer answer.
  servers.forEach((server, rank) => {
    const poll = () => {
      server.ledger.poll();
      clock.set(poll, POLL_MS);
    };
    clock.set(poll, 1 + Math.floor((rank * POLL_MS) / servers.length));
  });
  const limit = { count: 6, windowSeconds: 60 };
  let writes = 0;
  const put = store.put.bind(store);
  store.put = (...args) => {
    writes++;
    return put(...args);
  };
  const refuses = async (server: Server) => {
    const [before, at] = [writes, clock.ms];
    const refused = await server.ledger.refuses(COUNTER, limit);
    assert.equal(writes, before, "no write");
    assert.equal(clock.ms, at, "not held");
    return refused;
  };
  for (const server of servers) {
    for (let i = 0; i < 2; i++) {
      assert.notEqual(await settled(send(server, limit, clock), clock), null);
    }
  }
  // Nobody has answered yet: another may lend.
  for (const server of servers) assert.equal(await refuses(server), false);
  for (const server of servers) {
    const sent = await settled(timed(server, limit, clock), clock);
    assert.equal(sent.accepted, false);
  }
  // Every holder has answered. From here each listing shows the record as
  // before any answer, so each server's view lacks them after its next poll
  // (as a view does that predates an answer given since): only the record
  // read afresh has them.
  const list = store.list.bind(store);
  store.list = async () =>
    (await list()).map((entry) =>
      entry.record === null
        ? entry
        : { ...entry, record: { ...entry.record, wants: {}, answers: {} } }
    );
  await clock.moveTo(clock.ms + 2 * POLL_MS);
  for (const server of servers) assert.equal(await refuses(server), true);
  // Once the first requests leave the window, the answers have run out.
  await clock.moveTo(62_000);
  for (const server of servers) assert.equal(await refuses(server), false);
});
