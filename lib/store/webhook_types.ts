/**
 * Webhooks in the store, as types: the endpoints every server shares, the
 * events, and the outbox of deliveries written in the commit of the change
 * that raises them (lib/store/layout/_webhooks.ts); their rules are in
 * `webhooks.ts`, the sender in lib/webhooks/. Importing only types of
 * modules that import nothing, so that `types.ts` may name them.
 * @module
 */

import type { EntryKey } from "./entries.ts";

/** Every event a key raises, in the order `keys webhooks add --help` lists them. */
export const EVENT_TYPES = [
  "key.created",
  "key.revoked",
  "key.rotated",
  "key.updated",
  "key.exposed",
  "key.new_network",
  "key.refused_network",
  "key.rate_limited",
  "key.expiring",
  "key.expired",
] as const;

export type KeyEventType = typeof EVENT_TYPES[number];
/** What a delivery may carry: a key's event, or the console's test. */
export type EventType = KeyEventType | "webhook.test";

/** The most endpoints: each event is one delivery row per endpoint, in the change's commit. */
export const MAX_ENDPOINTS = 10;
/**
 * Pending deliveries kept, all endpoints together; past it the sweep drops
 * the oldest of {@linkcode TRAFFIC_EVENTS} first, then the oldest of the rest.
 */
export const MAX_PENDING = 10_000;
/**
 * Events a client's requests raise: whoever holds one key can raise many, so
 * past the bound they go before any change's or exposure's, which they could
 * otherwise push out.
 */
export const TRAFFIC_EVENTS: ReadonlySet<EventType> = new Set([
  "key.new_network",
  "key.refused_network",
  "key.rate_limited",
  "webhook.test",
]);
/** Finished deliveries kept for `keys webhooks deliveries` and `redeliver`. */
export const DONE_KEPT = 1_000;
/** Attempts kept on each delivery: the latest. */
export const ATTEMPTS_KEPT = 10;

/** An endpoint as the console shows it: never its secret. */
export interface WebhookEndpoint {
  id: number;
  url: string;
  events: KeyEventType[];
  createdAt: string;
  /** When the secret was last set (add or rotate-secret). */
  secretSetAt: string;
}

/**
 * An endpoint as stored: with the HMAC key (the base64 part of its `whsec_`
 * secret), which signing needs in the clear, as every Standard Webhooks
 * sender does. Nothing prints or logs it after `add` and `rotate-secret`.
 */
export interface StoredEndpoint extends WebhookEndpoint {
  signingKey: string;
}

/** The one entry that holds every endpoint, so a change reads them in its first read. */
export interface EndpointList {
  lastId: number;
  endpoints: StoredEndpoint[];
}

/** A Standard Webhooks payload, and the id its `webhook-id` header carries. */
export interface WebhookEvent {
  /** Stable across retries and redeliveries, so a receiver can drop repeats. */
  id: string;
  type: EventType;
  timestamp: string;
  data: Record<string, unknown>;
}

/** One try at sending a delivery. */
export interface Attempt {
  at: string;
  /** The receiver's HTTP status; null when none came (refused, timed out). */
  status: number | null;
  /** Why it failed without a status: "timeout", "connection", "not_permitted". */
  error: string | null;
  ms: number;
}

/** One event for one endpoint, pending or finished. */
export interface Delivery {
  /** `<event id>.<endpoint id>`. */
  id: string;
  endpointId: number;
  event: WebhookEvent;
  state: "pending" | "delivered" | "failed" | "dropped";
  createdAt: string;
  /** When next due (pending), or when it finished. */
  dueAt: string;
  /** Tries so far, and the latest {@linkcode ATTEMPTS_KEPT} of them. */
  tries: number;
  attempts: Attempt[];
}

/** A pending delivery as read, which a claim or finish must find unchanged. */
export interface Claim {
  delivery: Delivery;
  key: EntryKey;
  versionstamp: string;
}

/**
 * The endpoints and outbox (lib/store/layout/_webhooks.ts). Every move of a
 * delivery is a compare-and-set, so of several servers one claims it.
 */
export interface WebhookStore {
  /** Every endpoint, with its signing key: for the sender only. */
  endpoints(): Promise<StoredEndpoint[]>;
  addEndpoint(
    input: { url: string; events: KeyEventType[]; signingKey: string },
  ): Promise<WebhookEndpoint>;
  /** Removes an endpoint (`WebhookEndpointError` when none has the id). */
  removeEndpoint(id: number): Promise<WebhookEndpoint>;
  /** Replaces its signing key; the endpoint as shown, without it. */
  setSigningKey(id: number, signingKey: string): Promise<WebhookEndpoint>;
  /** Queues an event for one endpoint, due at once. */
  enqueue(event: WebhookEvent, endpointId: number): Promise<Delivery>;
  /** Up to `limit` of an endpoint's deliveries due at `now` (ms). */
  due(endpointId: number, now: number, limit: number): Promise<Claim[]>;
  /** Takes a due delivery until `untilMs`; null when another took it. */
  claim(claim: Claim, untilMs: number): Promise<Claim | null>;
  /** Records a try: due again at `nextMs`, or finished as `state`. */
  finish(
    claim: Claim,
    attempt: Attempt,
    next: { nextMs: number } | { state: Delivery["state"] },
  ): Promise<boolean>;
  /** Pending and kept deliveries, the latest first. */
  deliveries(options?: { endpointId?: number }): Promise<Delivery[]>;
  /** Queues a finished delivery again; null when none has the id. */
  redeliver(id: string, now: Date): Promise<Delivery | null>;
  /** Drops what is past the bound, or for a removed endpoint; returns it. */
  sweep(
    options: { maxPending: number; doneKept: number; now: Date },
  ): Promise<Delivery[]>;
}
