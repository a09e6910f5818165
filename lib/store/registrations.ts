/**
 * The instance registry's rules, written once over any backend: what a
 * registration stores, that a renewal is a compare-and-set on its version,
 * and how one is read back: checked field by field, so that one
 * registration written wrong (by a bug, a newer version or a hand) is one
 * broken registration, not an unreadable listing that holds every change up
 * to its deadline and is never removed.
 *
 * @module
 */

import type { StoreBackend, StoredInstance } from "./backend.ts";
import type { InstanceInfo, InstanceRecord } from "./types.ts";

/**
 * How long a server's lease lasts unless set, and the longest any counts as
 * (lib/auth/lease.ts): a change waits at most this for a paused server.
 */
export const LEASE_MS = 3000;

/**
 * Added to a lease before a registration seen unchanged counts as lapsed:
 * monotonic clocks of two processes agree on a duration within far less.
 */
export const LEASE_MARGIN_MS = 50;

/**
 * The lease a registration claims, as far as it can be true: no server takes
 * one longer than LEASE_MS (lib/auth/lease.ts refuses it), so a longer or
 * absurd claim, from a buggy or hostile writer, cannot hold every change up.
 */
export function leaseOf(instance: Pick<InstanceRecord, "leaseMs">): number {
  const claimed = instance.leaseMs;
  return Number.isFinite(claimed) && claimed > 0
    ? Math.min(claimed, LEASE_MS)
    : LEASE_MS;
}

/** The longest host name a registration may carry (RFC 1035's 255). */
const HOST_MAX = 255;

/** A registration's fields as read, before they are checked. */
export interface StoredRegistration {
  host: unknown;
  pid: unknown;
  startedAt: unknown;
  leaseMs: unknown;
  acked: unknown;
}

/**
 * The registration `id` at `version`, read from `stored`. One that cannot
 * be read is marked `broken`: it owes every change (acked -1), claims no
 * lease of its own, and so is removed as lapsed by the next change that
 * waits a lease for it, as a silent server would be.
 */
export function readRegistration(
  stored: unknown,
  options: { id: string; version: string },
): InstanceRecord {
  const { id, version } = options;
  const fields = typeof stored === "object" && stored !== null
    ? stored as StoredRegistration
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
  return {
    id,
    version,
    host: fields.host,
    pid: fields.pid as number,
    startedAt,
    leaseMs: fields.leaseMs,
    acked,
  };
}

/** Stores a new registration; returns its version. */
export async function registerIn(
  backend: StoreBackend,
  info: InstanceInfo,
): Promise<string> {
  const version = await backend.putInstance(storedInstance(info));
  if (version === null) {
    throw new Error("unreachable: an unconditional write conflicted");
  }
  return version;
}

/**
 * Rewrites a registration (a new `acked`) only if it is still at
 * `version`; the new version, or null when it was removed or changed.
 */
export function renewIn(
  backend: StoreBackend,
  info: InstanceInfo,
  options: { version: string },
): Promise<string | null> {
  return backend.putInstance(storedInstance(info), options);
}

/** Every registration, each read as {@linkcode readRegistration} reads it. */
export async function instancesIn(
  backend: StoreBackend,
): Promise<InstanceRecord[]> {
  return (await backend.readInstances()).map(({ stored, id, version }) =>
    readRegistration(stored, { id, version })
  );
}

/** A registration as stored: the revision as text, which every database holds alike. */
function storedInstance(info: InstanceInfo): StoredInstance {
  return { ...info, acked: info.acked.toString() };
}

/** A revision as stored (a bigint, or its decimal text), or null. */
function revision(value: unknown): bigint | null {
  if (typeof value === "bigint") return value >= -1n ? value : null;
  if (typeof value !== "string" || !/^(-1|0|[1-9][0-9]{0,18})$/.test(value)) {
    return null;
  }
  return BigInt(value);
}

/** An instant as stored (a Date, or ISO text), in ISO form, or null. */
function instant(value: unknown): string | null {
  const date = value instanceof Date
    ? value
    : typeof value === "string"
    ? new Date(value)
    : null;
  return date === null || Number.isNaN(date.getTime())
    ? null
    : date.toISOString();
}
