/**
 * The instance registry's rules, written once over any backend: what a
 * registration stores and how it is read back, field by field, so one written
 * wrong (by a bug, a newer version or a hand) is one broken registration, not
 * an unreadable listing holding every change up to its deadline, never removed.
 * @module
 */

import type { StoredInstance } from "./backend.ts";
import type {
  InstanceInfo,
  InstanceRecord,
  ServerFigures,
  TrafficFigures,
} from "./types.ts";

/** A lease's length unless set, and the longest one counts as: a change's longest wait. */
export const LEASE_MS = 3000;

/** Added to a lease before it counts as lapsed: two processes' monotonic clocks agree closer. */
export const LEASE_MARGIN_MS = 50;

/**
 * Seen at one version since `since` for a whole lease: any lease it holds
 * rests on a read older than that, so it has run out, and the registration
 * may be removed at that version (a renewal in between wins).
 */
export function hasLapsed(
  instance: Pick<InstanceRecord, "leaseMs">,
  times: { since: number; now: number },
): boolean {
  return times.now - times.since >= leaseOf(instance) + LEASE_MARGIN_MS;
}

/**
 * Readable and renewed at least once: a server that may hold a lease. A
 * start that failed right after registering never counts.
 */
export function hasRenewed(
  instance: Pick<InstanceRecord, "broken" | "acked">,
): boolean {
  return !instance.broken && instance.acked >= 0n;
}

/**
 * The lease a registration claims, capped at LEASE_MS (as lib/auth/lease.ts
 * caps it), so no claim holds every change up.
 */
export function leaseOf(instance: Pick<InstanceRecord, "leaseMs">): number {
  const claimed = instance.leaseMs;
  return Number.isFinite(claimed) && claimed > 0
    ? Math.min(claimed, LEASE_MS)
    : LEASE_MS;
}

/** The longest host name a registration may carry (RFC 1035's 255). */
const HOST_MAX = 255;

/** The longest release a registration may carry (deno.json's `version`). */
const RELEASE_MAX = 64;

/**
 * Registration `id` at `version`, read from `stored` as a backend found it.
 * `release` and `figures` only inform `keys status`: one malformed reads as
 * absent, and the registration stays whole. One that cannot
 * be read is marked `broken`: it owes every change (acked -1), claims no
 * lease of its own, and so is removed as lapsed by the next change that
 * waits a lease for it, as a silent server would be.
 */
export function readRegistration(
  { id, version, stored }: { id: string; version: string; stored: unknown },
): InstanceRecord {
  const fields = typeof stored === "object" && stored !== null
    ? stored as Record<keyof StoredInstance, unknown>
    : null;
  const acked = fields === null ? null : revision(fields.acked);
  const startedAt = fields === null ? null : instant(fields.startedAt);
  if (
    fields === null || acked === null || startedAt === null ||
    typeof fields.host !== "string" || fields.host.length > HOST_MAX ||
    !Number.isSafeInteger(fields.pid) || (fields.pid as number) <= 0 ||
    typeof fields.leaseMs !== "number" || !(fields.leaseMs > 0)
  ) {
    return {
      id,
      version,
      host: "",
      pid: 0,
      startedAt: "",
      leaseMs: Number.NaN,
      acked: -1n,
      broken: true,
    };
  }
  const record: InstanceRecord = {
    id,
    version,
    host: fields.host,
    pid: fields.pid as number,
    startedAt,
    leaseMs: fields.leaseMs,
    acked,
  };
  const release = releaseOf(fields.release);
  if (release !== null) record.release = release;
  const figures = figuresOf(fields.figures);
  if (figures !== null) record.figures = figures;
  return record;
}

/** A release as stored: printable text of at most RELEASE_MAX characters, or null. */
function releaseOf(value: unknown): string | null {
  return typeof value === "string" && value.length > 0 &&
      value.length <= RELEASE_MAX && /^[\x21-\x7e]+$/.test(value)
    ? value
    : null;
}

const TRAFFIC_FIELDS: readonly (keyof TrafficFigures)[] = [
  "requests",
  "ok",
  "unauthorized",
  "lockedOut",
  "rateLimited",
  "rateLimitedKeys",
];

/** Figures as stored, every count a whole number from 0, or null. */
function figuresOf(value: unknown): ServerFigures | null {
  if (typeof value !== "object" || value === null) return null;
  const fields = value as Record<keyof ServerFigures, unknown>;
  const at = instant(fields.at);
  const lastMinute = trafficOf(fields.lastMinute);
  const sinceStart = trafficOf(fields.sinceStart);
  if (
    at === null || lastMinute === null || sinceStart === null ||
    !isCount(fields.lockedAddresses)
  ) return null;
  return {
    at,
    lastMinute,
    sinceStart,
    lockedAddresses: fields.lockedAddresses,
  };
}

function trafficOf(value: unknown): TrafficFigures | null {
  if (typeof value !== "object" || value === null) return null;
  const fields = value as Record<keyof TrafficFigures, unknown>;
  const read = {} as TrafficFigures;
  for (const name of TRAFFIC_FIELDS) {
    const count = fields[name];
    if (!isCount(count)) return null;
    read[name] = count;
  }
  return read;
}

function isCount(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

/** A registration as stored: the revision as text, which every database holds alike. */
export function storedInstance(info: InstanceInfo): StoredInstance {
  return { ...info, acked: info.acked.toString() };
}

/** A revision as stored (decimal text), or null. */
function revision(value: unknown): bigint | null {
  return typeof value === "string" && /^(-1|0|[1-9][0-9]{0,18})$/.test(value)
    ? BigInt(value)
    : null;
}

/** An instant as stored (ISO text), in ISO form, or null. */
function instant(value: unknown): string | null {
  const date = typeof value === "string" ? new Date(value) : null;
  return date === null || Number.isNaN(date.getTime())
    ? null
    : date.toISOString();
}
