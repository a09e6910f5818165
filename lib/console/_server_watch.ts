/**
 * Which registered servers are live, told as a change's wait and the servers'
 * own listings tell it (lib/store/registrations.ts): by watching each
 * registration's version on this process's monotonic clock. A time a server
 * wrote is never compared with this host's clock, which may differ from the
 * server's by more than a lease.
 *
 * A live server rewrites its registration about every half lease, so a
 * registration written while watched is live (if renewed and readable), and
 * one left unchanged for a whole lease, or removed, holds no lease. Every
 * registration of the first listing is decided within a lease of it.
 *
 * @module
 */

import {
  hasLapsed,
  hasRenewed,
  LEASE_MARGIN_MS,
  LEASE_MS,
} from "../store/registrations.ts";
import type { InstanceRecord, InstanceRegistry } from "../store/types.ts";

/**
 * `live`: written while watched, renewed and readable. `lapsed`: unchanged for
 * a whole lease, or removed while watched. `starting`: registered while watched
 * but not yet renewed. `broken`: rewritten, but unreadable.
 */
export type ServerState = "live" | "lapsed" | "starting" | "broken";

/** One registration as watched. */
export interface WatchedServer {
  /** As last listed. */
  record: InstanceRecord;
  state: ServerState;
  /** Gone while watched: it stopped, or a server or change removed it as lapsed. */
  removed: boolean;
  /**
   * Milliseconds since the registration was last written, on this process's
   * clock: at most this when live, at least this otherwise.
   */
  leaseAgeMs: number;
}

export interface WatchOptions {
  /** Monotonic milliseconds. */
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
  /** Between listings; 100 ms unless set. */
  pollMs?: number;
}

interface Watch {
  record: InstanceRecord;
  /** When a listing first showed its current version (after that listing). */
  since: number;
  /** Its current version was written after this (a listing's start); null: before the watch. */
  writtenAfter: number | null;
  state: ServerState | null;
  removed: boolean;
}

const POLL_MS = 100;

/**
 * Lists the registrations until each is decided (live, lapsed), at most a
 * lease and its margin after the first listing; returns them in listing
 * order. Throws what the store throws.
 */
export async function watchServers(
  registry: Pick<InstanceRegistry, "instances">,
  options: WatchOptions = {},
): Promise<{ servers: WatchedServer[]; watchedMs: number }> {
  const now = options.now ?? (() => performance.now());
  const sleep = options.sleep ??
    ((ms: number) => new Promise<void>((done) => setTimeout(done, ms)));
  const watched = new Map<string, Watch>();
  let first: number | null = null;
  let previous: number | null = null;
  let at: number;
  for (;;) {
    const started = now();
    const listed = await registry.instances();
    // After the read: a version listed now was written before this.
    at = now();
    first ??= at;
    const present = new Set<string>();
    for (const record of listed) {
      present.add(record.id);
      const seen = watched.get(record.id);
      if (seen === undefined || seen.record.version !== record.version) {
        watched.set(record.id, {
          record,
          since: at,
          // Not in the previous listing at this version: written since it began.
          writtenAfter: previous,
          state: null,
          removed: false,
        });
      }
    }
    previous = started;
    // What a listing shows may be as old as its start: a slow one must not
    // stretch a registration's quiet time past what it was.
    for (const [id, watch] of watched) decide(watch, present.has(id), started);
    const last = started >= first + LEASE_MS + LEASE_MARGIN_MS;
    if (last || [...watched.values()].every((w) => w.state !== null)) break;
    await sleep(options.pollMs ?? POLL_MS);
  }
  const end = now();
  return {
    servers: [...watched.values()].map((watch) => {
      const state = watch.state ??
        (watch.record.broken ? "broken" : "starting");
      // Live: written after `writtenAfter`. Otherwise: before `since`.
      const from = state === "live" ? watch.writtenAfter! : watch.since;
      return {
        record: watch.record,
        state,
        removed: watch.removed,
        leaseAgeMs: Math.max(0, end - from),
      };
    }),
    watchedMs: end - first,
  };
}

/** Decides a watch from the listing started at `at`, or leaves it undecided (null). */
function decide(watch: Watch, present: boolean, at: number): void {
  if (watch.removed) return;
  if (!present) {
    watch.state = "lapsed";
    watch.removed = true;
  } else if (hasLapsed(watch.record, { since: watch.since, now: at })) {
    watch.state = "lapsed";
  } else if (watch.writtenAfter !== null && hasRenewed(watch.record)) {
    watch.state = "live";
  } else {
    watch.state = null;
  }
}
