/**
 * The writer's half of the lease protocol (lib/auth/lease.ts): a change returns
 * only once every registered server acknowledged it or its lease ran out, so
 * no later request is answered with what the change replaced. Which changes
 * wait is in each change's type (lib/store/change.ts): none can forget it.
 * @module
 */

import { hasLapsed, LEASE_MARGIN_MS, LEASE_MS } from "./registrations.ts";
import { bounded } from "../util/bounded.ts";
import type { AcknowledgeReport, Lapsed } from "./change.ts";
import type { KeyService } from "./keys.ts";
import type { InstanceRecord, KeyStore } from "./types.ts";

/** What a wait reads: the revision and the registrations, and what it removes. */
export type Registry = Pick<
  KeyStore,
  "revision" | "instances" | "removeInstance"
>;

/** Grace past the deadline for removing lapsed registrations, which decide nothing here. */
const REMOVAL_GRACE_MS = 250;

export {
  type AcknowledgeReport,
  type Lapsed,
  WaitInterruptedError,
} from "./change.ts";

/** Options of {@linkcode acknowledged} and {@linkcode awaitAcknowledgement}. */
export interface AcknowledgeOptions {
  /** Called once when a wait has lasted 250 ms, with the servers still owing. */
  onWait?: (pending: Lapsed[], leaseMs: number) => void;
  /** Called after every wait. */
  onAcknowledged?: (report: AcknowledgeReport) => void;
  /** Called right after a change commits, before the wait: e.g. to poke this process's own lease. */
  onCommitted?: () => void;
  /**
   * Ends a wait early: the report says `interrupted`; a change through
   * {@linkcode acknowledged} throws {@linkcode WaitInterruptedError} with its
   * result.
   */
  signal?: AbortSignal;
  /** The revision to wait for, when known: a reader waits for what its read saw. */
  revision?: bigint;
  /** Where registrations are read; the acknowledged store unless set (tests slow these alone). */
  registry?: Registry;
}

/**
 * The store, whose authentication changes (by type) return once every server
 * has acknowledged or lost its lease; usage changes return at once.
 */
export function acknowledged(
  store: KeyService,
  options: AcknowledgeOptions = {},
): KeyService {
  const waiting: KeyService = store.with({
    acknowledge: async (change) => {
      options.onCommitted?.();
      return await awaitAcknowledgement(options.registry ?? waiting, {
        ...options,
        revision: change.revision,
      });
    },
  });
  return waiting;
}

/**
 * Waits until every registered server applied the store's current revision,
 * or its lease ran out. Call it after a change returned: every lease resting
 * on a read begun before the change ends within a lease's length of then, so
 * the wait is bounded even when the store cannot be read meanwhile.
 */
export async function awaitAcknowledgement(
  store: Registry,
  options: AcknowledgeOptions = {},
): Promise<AcknowledgeReport> {
  const returned = performance.now();
  // No registration's lease counts as longer (leaseOf, in hasLapsed), so every
  // lease resting on a read older than the change has ended by then.
  const deadline = returned + LEASE_MS + LEASE_MARGIN_MS;
  let revision: bigint | null = options.revision ?? null;
  const waitedFor = new Set<string>();
  const lapsed: Lapsed[] = [];
  /** When each registration was first seen at its current version. */
  const seen = new Map<string, { version: string; since: number }>();
  let told = false;
  let owing: InstanceRecord[] = [];
  /**
   * Registrations seen owing, by id: one gone at the next read did not confirm
   * either; it stopped, or another wait (a server settling a read, another
   * console) found its lease run out first and removed it.
   */
  const owed = new Map<string, InstanceRecord>();
  const { signal } = options;
  // Settles only when aborted: every await of the wait races it.
  const stopped = new Promise<"stopped">((resolve) => {
    if (signal?.aborted) resolve("stopped");
    signal?.addEventListener("abort", () => resolve("stopped"), {
      once: true,
    });
  });
  const report = (interrupted = false): AcknowledgeReport => {
    const done = {
      revision: revision ?? -1n,
      waitedMs: performance.now() - returned,
      servers: waitedFor.size,
      lapsed,
      interrupted,
      owing: interrupted ? owing.map(describe) : [],
      remainingMs: interrupted ? Math.max(0, deadline - performance.now()) : 0,
    };
    options.onAcknowledged?.(done);
    return done;
  };
  for (let delay = 2;; delay = Math.min(delay * 2, 50)) {
    if (signal?.aborted) return report(true);
    try {
      // Each read is cut off at the deadline: a store that hangs (a frozen
      // database, up to its driver's 15 s limit) holds no change up past it.
      revision ??= await within(store.revision(), deadline, stopped);
      const registrations = await within(store.instances(), deadline, stopped);
      // After the read: a version seen now was written before this moment.
      const now = performance.now();
      const pending: InstanceRecord[] = [];
      const present = new Set(registrations.map((instance) => instance.id));
      for (const [id, instance] of owed) {
        if (present.has(id)) continue;
        owed.delete(id);
        lapsed.push({ ...describe(instance), gone: true });
      }
      for (const instance of registrations) {
        if (instance.acked >= revision) {
          owed.delete(instance.id);
          continue;
        }
        waitedFor.add(instance.id);
        const before = seen.get(instance.id);
        if (before === undefined || before.version !== instance.version) {
          seen.set(instance.id, { version: instance.version, since: now });
          pending.push(instance);
        } else if (hasLapsed(instance, { since: before.since, now })) {
          // Removed only at this version, so that the server, if alive,
          // must register afresh and read the store before it answers from
          // memory again.
          await within(
            store.removeInstance(instance.id, { version: instance.version }),
            deadline,
          ).catch(() => {});
          owed.delete(instance.id);
          lapsed.push(describe(instance));
          continue;
        } else {
          pending.push(instance);
        }
        owed.set(instance.id, instance);
      }
      owing = pending;
      if (pending.length === 0) return report();
      if (!told && now - returned >= 250) {
        told = true;
        options.onWait?.(pending.map(describe), LEASE_MS);
      }
    } catch {
      // The store cannot be read: the deadline below still holds.
    }
    if (performance.now() >= deadline) {
      // Every lease resting on a read older than the change has ended, and
      // a registration still owing rests on such a read: removed at the
      // version seen, so the next change does not wait for it again.
      await within(
        Promise.allSettled(
          owing.map((instance) =>
            store.removeInstance(instance.id, { version: instance.version })
          ),
        ),
        performance.now() + REMOVAL_GRACE_MS,
      ).catch(() => {});
      lapsed.push(...owing.map(describe));
      return report();
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      new Promise((resolve) => timer = setTimeout(resolve, delay)),
      stopped,
    ]);
    clearTimeout(timer);
  }
}

/** `work`, or DeadlineError at monotonic `until` (or once `stopped` settles). */
function within<T>(
  work: Promise<T>,
  until: number,
  stopped?: Promise<unknown>,
): Promise<T> {
  const bound = bounded(work, Math.max(0, until - performance.now()));
  return stopped === undefined ? bound : Promise.race([
    bound,
    stopped.then(() => Promise.reject(new Error("wait interrupted"))),
  ]);
}

function describe(instance: InstanceRecord): Lapsed {
  const { id, host, pid } = instance;
  return instance.broken ? { id, host, pid, broken: true } : { id, host, pid };
}
