/**
 * The sender each server runs in the background, never on a request's path:
 * it claims each due delivery through the store's compare-and-set (so of
 * several servers one sends it), sends it with a deadline, and records the
 * try: done on a 2xx, else due again after a backoff (`schedule.ts`). An
 * endpoint has at most `perEndpoint` deliveries in flight, and each endpoint
 * is read and claimed for apart, so a receiver that is down, hangs or fails
 * holds up only its own deliveries.
 * @module
 */

import type { KeyStore } from "../store/types.ts";
import type { Claim, StoredEndpoint } from "../store/webhook_types.ts";
import { remindOfExpiry, sweepOutbox } from "./housekeeping.ts";
import { nextTry } from "./schedule.ts";
import { delivered, sendOnce } from "./send.ts";
import { errorCode } from "../util/error_code.ts";

/** The longest an endpoint rests after a failed try before its next due delivery. */
const REST_MS = 1_000;

/** How the sender runs; every time is injectable for tests. */
export interface SenderOptions {
  /** The first retry's delay; default 5 s. */
  retryBaseMs?: number;
  /** One try's deadline; default 10 s. */
  timeoutMs?: number;
  /** Deliveries in flight per endpoint; default 4. */
  perEndpoint?: number;
  /** How often the outbox is read for due deliveries; default 1 s. */
  pollMs?: number;
  /** How often the outbox is swept and expiry reminders raised; default 60 s. */
  housekeepingMs?: number;
  /** Days before expiry at which `key.expiring` is sent; default 14 and 1. */
  expiringDays?: readonly number[];
  /** Hosts deliveries may reach (WEBHOOK_HOSTS); unset, any the process may. */
  hosts?: readonly string[];
  /** The clock; default Date.now. */
  now?: () => number;
  log?: (fields: Record<string, unknown>) => void;
}

type Store = Pick<
  KeyStore,
  "webhooks" | "dueKeys" | "get" | "retire" | "noteExpiring"
>;

/** Sends the outbox's deliveries until stopped. */
export class WebhookSender {
  #store: Store;
  #retryBaseMs: number;
  #timeoutMs: number;
  #perEndpoint: number;
  #pollMs: number;
  #housekeepingMs: number;
  #days: readonly number[];
  #hosts: readonly string[] | undefined;
  #now: () => number;
  #log: (fields: Record<string, unknown>) => void;
  #inFlight = new Map<number, number>();
  /** Endpoint id → until when it rests after a failed try (this server's view). */
  #resting = new Map<number, number>();
  #sending = new Set<Promise<void>>();
  #round: Promise<void> | null = null;
  #again = false;
  #lastHousekeeping = -Infinity;
  #housekeepingRun: Promise<void> | null = null;
  /** Expiry reminders settled (`key deadline days`), each noted once per process. */
  #reminded = new Set<string>();
  /** The code of the failure the last round ended in; null when it succeeded. */
  #failure: string | null = null;
  #timer: ReturnType<typeof setInterval> | undefined;
  #stop = new AbortController();

  constructor(store: Store, options: SenderOptions = {}) {
    this.#store = store;
    this.#retryBaseMs = options.retryBaseMs ?? 5_000;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#perEndpoint = options.perEndpoint ?? 4;
    this.#pollMs = options.pollMs ?? 1_000;
    this.#housekeepingMs = options.housekeepingMs ?? 60_000;
    this.#days = options.expiringDays ?? [14, 1];
    this.#hosts = options.hosts;
    this.#now = options.now ?? Date.now;
    this.#log = options.log ?? ((f) => console.error(JSON.stringify(f)));
  }

  /** Reads the outbox every poll from now on. */
  start(): void {
    this.#timer = setInterval(() => this.poke(), this.#pollMs);
    this.poke();
  }

  /** Reads the outbox soon (after the round under way, if any). */
  poke(): void {
    if (this.#stop.signal.aborted) return;
    if (this.#round !== null) {
      this.#again = true;
      return;
    }
    this.#round = this.#roundOnce()
      .then(() => this.#failing(null), (error) => this.#failing(error))
      .finally(() => {
        this.#round = null;
        if (this.#again) {
          this.#again = false;
          this.poke();
        }
      });
  }

  /** Resolves once every delivery and housekeeping under way has been recorded. */
  async idle(): Promise<void> {
    this.poke();
    // A finished send starts a round at once, so quiet means all three.
    while (
      this.#round !== null || this.#housekeepingRun !== null ||
      this.#sending.size > 0
    ) {
      await Promise.all([this.#round, this.#housekeepingRun, ...this.#sending]);
    }
  }

  /** Stops reading; deliveries in flight are cut off and left due at once for another server. */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#stop.abort();
    while (this.#round !== null) await this.#round;
    await this.#housekeepingRun;
    while (this.#sending.size > 0) await Promise.all(this.#sending);
  }

  /** Logs a round's failure once, and its recovery, not every second of an outage. */
  #failing(error: unknown): void {
    const code = error === null ? null : errorCode(error);
    if (code === this.#failure) return;
    this.#failure = code;
    this.#log(
      code === null
        ? { msg: "webhook_rounds_resumed" }
        : { msg: "webhook_round_failed", code },
    );
  }

  async #roundOnce(): Promise<void> {
    const endpoints = await this.#store.webhooks.endpoints();
    const now = this.#now();
    if (
      now - this.#lastHousekeeping >= this.#housekeepingMs &&
      this.#housekeepingRun === null
    ) {
      // Beside the rounds: a retirement waits for every server, which
      // must not hold up a delivery.
      this.#lastHousekeeping = now;
      this.#housekeepingRun = this.#housekeeping(
        endpoints.length > 0,
        new Date(now),
      ).catch((error) =>
        this.#log({
          msg: "webhook_housekeeping_failed",
          code: errorCode(error),
        })
      ).finally(() => this.#housekeepingRun = null);
    }
    for (const endpoint of endpoints) {
      const free = this.#perEndpoint - (this.#inFlight.get(endpoint.id) ?? 0);
      if (free <= 0 || this.#stop.signal.aborted) continue;
      if ((this.#resting.get(endpoint.id) ?? -Infinity) > now) continue;
      const due = await this.#store.webhooks.due(endpoint.id, now, free);
      for (const found of due) {
        // Held past one try's deadline: a server that dies mid-send leaves
        // the delivery due again then, for another to send.
        const claim = await this.#store.webhooks.claim(
          found,
          this.#now() + this.#timeoutMs + 5_000,
        );
        if (claim !== null) this.#track(endpoint, claim);
      }
    }
  }

  async #housekeeping(any: boolean, now: Date): Promise<void> {
    await sweepOutbox(this.#store, { now, log: this.#log });
    if (any) {
      await remindOfExpiry(this.#store, {
        now,
        days: this.#days,
        settled: this.#reminded,
      });
    }
  }

  #track(endpoint: StoredEndpoint, claim: Claim): void {
    const id = endpoint.id;
    this.#inFlight.set(id, (this.#inFlight.get(id) ?? 0) + 1);
    const sending = this.#send(endpoint, claim)
      .catch((error) =>
        this.#log({ msg: "webhook_record_failed", code: errorCode(error) })
      )
      .finally(() => {
        this.#inFlight.set(id, this.#inFlight.get(id)! - 1);
        this.#sending.delete(sending);
        // A slot is free: what waited for it need not wait for the poll.
        this.poke();
      });
    this.#sending.add(sending);
  }

  async #send(endpoint: StoredEndpoint, claim: Claim): Promise<void> {
    const { delivery } = claim;
    const attempt = await sendOnce(endpoint, delivery.event, {
      at: new Date(this.#now()),
      timeoutMs: this.#timeoutMs,
      signal: this.#stop.signal,
      hosts: this.#hosts,
    });
    const ok = delivered(attempt);
    const nowMs = this.#now();
    // A receiver that just failed is most likely down: its other deliveries
    // wait a moment, rather than each be tried back to back against it (a
    // backlog to a refused port took a third of a core, at each backoff).
    if (ok) this.#resting.delete(endpoint.id);
    else if (attempt.error !== "stopped") {
      this.#resting.set(
        endpoint.id,
        nowMs + Math.min(this.#retryBaseMs, REST_MS),
      );
    }
    // A test is for the admin waiting on it: retrying it would tell nobody.
    const once = delivery.event.type === "webhook.test";
    const next = ok || once
      ? null
      : attempt.error === "stopped"
      ? nowMs
      : nextTry(
        delivery.tries,
        {
          nowMs,
          createdMs: Date.parse(delivery.createdAt),
          baseMs: this.#retryBaseMs,
        },
      );
    // The try is logged however its record ends: one the store could not
    // write (an outage) is sent again once the claim runs out, and this line
    // tells that repeat from a new event.
    let recorded: boolean;
    let failure: unknown = null;
    try {
      recorded = await this.#store.webhooks.finish(
        claim,
        attempt,
        next === null ? { state: ok ? "delivered" : "failed" } : {
          nextMs: next,
        },
      );
    } catch (error) {
      recorded = false;
      failure = error;
    }
    this.#log({
      msg: "webhook_delivery",
      deliveryId: delivery.id,
      endpointId: endpoint.id,
      type: delivery.event.type,
      try: delivery.tries,
      status: attempt.status,
      error: attempt.error,
      ms: attempt.ms,
      outcome: ok ? "delivered" : next === null ? "failed" : "retry",
      ...(recorded ? {} : { recorded: false }),
      ...(failure === null ? {} : { code: errorCode(failure) }),
    });
  }
}
