/**
 * The rules of webhook events, once for every backend: which event an audit
 * line raises and what its payload carries (a key's id, name, e-mail and
 * hint, never the key or its hash), and the ids of events and deliveries.
 * @module
 */

import type { AuditEntry, KeyRecord } from "./types.ts";
import type { Delivery, KeyEventType, WebhookEvent } from "./webhook_types.ts";

/** An event a change raises without an audit line (a refused use, a rate limit, an expiry reminder). */
export interface Raised {
  type: KeyEventType;
  record: KeyRecord;
  facts: Record<string, unknown>;
}

/** A new event id: time-ordered (so the oldest sorts first), unique by its random part. */
export function eventId(at: Date): string {
  const tail = crypto.getRandomValues(new Uint8Array(8)).toHex();
  return `msg_${at.getTime().toString(36).padStart(9, "0")}${tail}`;
}

/** The event a key's audit line raises, if any (an import raises none). */
export function lineEvent(
  line: AuditEntry,
  record: KeyRecord,
  facts: Record<string, unknown> = {},
): Raised | null {
  const type = LINE_EVENTS[line.action];
  if (type === null) return null;
  // A revocation a deadline decided is written with its deadline as its time.
  const expired = line.action === "revoke" && record.expiresAt !== null &&
    record.revokedAt === record.expiresAt;
  return {
    type: expired ? "key.expired" : type,
    record,
    facts: { ...factsOf(line, record), ...facts },
  };
}

const LINE_EVENTS: Record<AuditEntry["action"], KeyEventType | null> = {
  create: "key.created",
  revoke: "key.revoked",
  rotate: "key.rotated",
  expose: "key.exposed",
  import: null,
  allow_from: "key.updated",
  rate_limit: "key.updated",
  network: "key.new_network",
};

function factsOf(line: AuditEntry, record: KeyRecord): Record<string, unknown> {
  switch (line.action) {
    case "create":
      return { expiresAt: record.expiresAt };
    case "revoke":
      return {
        revokedAt: record.revokedAt,
        reason: record.revokedReason,
        expiresAt: record.expiresAt,
      };
    case "rotate":
      return { replacedBy: record.replacedBy, worksUntil: record.expiresAt };
    case "expose":
      return { exposedAt: record.exposedAt, detail: line.detail };
    case "allow_from":
      return { changed: "allowFrom", allowFrom: record.allowFrom };
    case "rate_limit":
      return { changed: "rateLimit", rateLimit: record.rateLimit };
    default:
      return {};
  }
}

/** The payload of an event about `record`: its id, name, e-mail and hint, never its hash. */
export function keyEvent(raised: Raised, at: Date): WebhookEvent {
  const { record } = raised;
  return {
    id: eventId(at),
    type: raised.type,
    timestamp: at.toISOString(),
    data: {
      keyId: record.id,
      name: record.name,
      email: record.email,
      hint: record.hint,
      ...raised.facts,
    },
  };
}

/** The delivery of `event` to `endpointId`, due at once. */
export function newDelivery(event: WebhookEvent, endpointId: number): Delivery {
  return {
    id: `${event.id}.${endpointId}`,
    endpointId,
    event,
    state: "pending",
    createdAt: event.timestamp,
    dueAt: event.timestamp,
    tries: 0,
    attempts: [],
  };
}

/** The endpoint a delivery id names, or null when the id is not one. */
export function deliveryEndpoint(id: string): number | null {
  const match = /^msg_[0-9a-z]{9}[0-9a-f]{16}\.([1-9][0-9]{0,5})$/.exec(id);
  return match === null ? null : Number(match[1]);
}
