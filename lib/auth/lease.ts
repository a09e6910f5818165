/**
 * This process's lease: while it holds, requests are answered from memory.
 *
 * A change to a key returns only once every registered process has
 * acknowledged it or its lease has run out (docs/design.md, "Leases"). So a
 * process may answer from memory at monotonic time t only if
 *
 * 1. its registration was in the store before the read its lease rests on
 *    (a change made later finds it and waits for it), and
 * 2. t < start of that read + lease length, and
 * 3. its acknowledgement after that read was written, conditional on the
 *    registration's version, so a registration a change gave up on and
 *    removed can never be renewed.
 *
 * Without a lease every request waits for a store read that started after
 * it arrived: correctness never rests on a timer firing on time.
 *
 * @module
 */

import { LEASE_MS } from "../store/registrations.ts";
export { LEASE_MS };
import { Coalesced } from "../util/coalesce.ts";
import { bounded, DeadlineError } from "../util/bounded.ts";
import { StoreUnavailableError } from "../store/errors.ts";
import { VERSION } from "../util/version.ts";
import type {
  InstanceInfo,
  InstanceRegistry,
  KeyChanges,
  ServerFigures,
} from "../store/types.ts";

const POLL_MS = 100;
/** When the store pushes a notice at every change; the poll makes up lost ones. */
const POLL_MS_PUSHED = 500;

export interface LeaseOptions {
  /** At most {@linkcode LEASE_MS}: a change waits at most that long. */
  leaseMs?: number;
  pollMs?: number;
  /** Hears when the lease is lost or regained. */
  log?: (fields: Record<string, unknown>) => void;
  /**
   * What this server served so far, written with each renewal (about every
   * half lease) for `keys status`: never a write of its own.
   */
  figures?: () => ServerFigures;
  /**
   * How long a catch-up read may take before it fails as an outage: one
   * {@linkcode LEASE_MS} unless set (tests shorten it).
   */
  readTimeoutMs?: number;
}

export type ApplyChanges = (changes: KeyChanges) => Promise<void> | void;

/** The read a catch-up rests on. */
interface Read {
  /** Monotonic. */
  started: number;
  /** Null when the registration is gone. */
  version: string | null;
}

/** A process's registration and lease. Unstarted, it never holds a lease. */
export class Lease {
  #store: InstanceRegistry;
  #leaseMs: number;
  #pollMs: number | undefined;
  #log?: LeaseOptions["log"];
  #figures?: LeaseOptions["figures"];
  #subscribers: ApplyChanges[] = [];
  #pollers: (() => Promise<void>)[] = [];
  #applied = -1n;
  #sync: Coalesced<Read>;
  #until = -Infinity;
  #info: InstanceInfo | null = null;
  #version: string | null = null;
  #running = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #ticking: Promise<void> | null = null;
  #again = false;
  #unlisten: (() => Promise<void>) | null = null;
  #lost = false;
  #readTimeoutMs: number;

  constructor(store: InstanceRegistry, options: LeaseOptions = {}) {
    this.#store = store;
    this.#leaseMs = options.leaseMs ?? LEASE_MS;
    // A writer trusts no longer claim (store/acknowledged.ts): a longer
    // lease would outlive the wait of a change.
    if (!(this.#leaseMs > 0 && this.#leaseMs <= LEASE_MS)) {
      throw new RangeError(
        `A lease lasts more than 0 and at most ${LEASE_MS} ms, not ${this.#leaseMs}`,
      );
    }
    this.#pollMs = options.pollMs;
    this.#log = options.log;
    this.#figures = options.figures;
    this.#readTimeoutMs = options.readTimeoutMs ?? LEASE_MS;
    this.#sync = new Coalesced(() => this.#boundedRead());
  }

  /** `apply` gets each batch before it counts as applied, and must drop what it invalidates first. */
  subscribe(apply: ApplyChanges): void {
    this.#subscribers.push(apply);
  }

  /** Runs `poll` after every poll of the store, not waited for: a hook, not a step of the lease. */
  onPoll(poll: () => Promise<void>): void {
    this.#pollers.push(poll);
  }

  /** The poll's interval, once started. */
  get pollMs(): number {
    return this.#pollMs ?? POLL_MS;
  }

  get held(): boolean {
    return performance.now() < this.#until;
  }

  /** Every change up to it has been applied. */
  get applied(): bigint {
    return this.#applied;
  }

  get id(): string | null {
    return this.#info?.id ?? null;
  }

  /** Resolves once every change committed before the call is applied; throws StoreUnavailableError. */
  async catchUp(): Promise<void> {
    await this.#sync.get();
  }

  /** Registers and starts renewing; resolves after the first attempt, held or not. */
  async start(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    this.#pollMs ??= this.#store.onChange ? POLL_MS_PUSHED : POLL_MS;
    try {
      this.#unlisten = await this.#store.onChange?.(() => this.poke()) ??
        null;
    } catch {
      // Without notices the poll still sees every change.
    }
    this.#ticking = this.#tick();
    await this.#ticking;
  }

  /** Asks the store for changes now rather than at the next poll. */
  poke(): void {
    if (!this.#running) return;
    if (this.#ticking !== null) {
      this.#again = true;
      return;
    }
    clearTimeout(this.#timer);
    this.#ticking = this.#tick();
  }

  /** Gives up the lease at once, then removes the registration, so no change waits for it. */
  async stop(): Promise<void> {
    this.#running = false;
    this.#until = -Infinity;
    clearTimeout(this.#timer);
    await this.#ticking?.catch(() => {});
    await this.#unlisten?.().catch(() => {});
    const id = this.#info?.id;
    this.#info = null;
    if (id !== undefined) await this.#store.removeInstance(id).catch(() => {});
  }

  /**
   * The read, failed as an outage once it has taken a lease's length: a read
   * that slow grants no lease (it would end before the read does), and one
   * that never settles (a store frozen mid-write) must not hold every later
   * catch-up, which starts only after it (issue 29: a server without its
   * lease answered nothing for 11 minutes).
   */
  #boundedRead(): Promise<Read> {
    return bounded(this.#read(), this.#readTimeoutMs).catch((error) => {
      if (!(error instanceof DeadlineError)) throw error;
      throw new StoreUnavailableError(
        "store_unavailable",
        "The key store cannot be read",
        { cause: error },
      );
    });
  }

  async #read(): Promise<Read> {
    const started = performance.now();
    const { revision, version } = await this.#store.pollInstance(
      this.#info?.id ?? "",
    );
    if (revision > this.#applied) {
      const changes = await this.#store.changesSince(this.#applied);
      for (const apply of this.#subscribers) await apply(changes);
      if (changes.revision > this.#applied) this.#applied = changes.revision;
    }
    return { started, version };
  }

  async #tick(): Promise<void> {
    try {
      await this.#renew();
      for (const poll of this.#pollers) poll().catch(() => {});
      // Only once a lease is held again: a tick that found its registration
      // removed has lost it, not regained it.
      if (this.#lost && this.held) {
        this.#lost = false;
        this.#log?.({ msg: "lease_held", instance: this.#info?.id });
      }
    } catch (error) {
      // The lease held so far still ends on time by itself; requests read
      // the store after that, and meet the outage there.
      this.#note("store_unreachable", error);
    } finally {
      this.#ticking = null;
      if (this.#running) {
        if (this.#again) {
          this.#again = false;
          this.#ticking = this.#tick();
        } else {
          this.#timer = setTimeout(() => {
            this.#ticking = this.#tick();
          }, this.#pollMs);
        }
      }
    }
  }

  async #renew(): Promise<void> {
    if (this.#info === null) {
      // Registered before the read the lease rests on: a change made after
      // that read finds this registration and waits for it.
      const info: InstanceInfo = {
        id: crypto.randomUUID(),
        host: hostname(),
        pid: Deno.pid,
        startedAt: new Date().toISOString(),
        leaseMs: this.#leaseMs,
        acked: -1n,
        release: VERSION,
        ...this.#published(),
      };
      this.#version = await this.#store.registerInstance(info);
      this.#info = info;
    }
    const { started, version } = await this.#sync.get();
    if (!this.#running) return;
    // A change gave up waiting and removed it (this process was paused or
    // cut off past its lease).
    if (version === null || version !== this.#version) return this.#removed();
    const info = this.#info!;
    const due = info.acked < this.#applied ||
      this.#until - performance.now() < this.#leaseMs / 2;
    if (!due) return;
    const next = { ...info, acked: this.#applied, ...this.#published() };
    const renewed = await this.#store.renewInstance(next, version);
    if (renewed === null) return this.#removed();
    this.#info = next;
    this.#version = renewed;
    // From the read's start, not from now: a change committed after the
    // read began may be one this process has not seen.
    if (this.#running) this.#until = started + this.#leaseMs;
  }

  /** The figures to write with a registration, if any can be read. */
  #published(): Pick<InstanceInfo, "figures"> {
    try {
      return this.#figures ? { figures: this.#figures() } : {};
    } catch {
      // Only `keys status` misses them; the lease must not.
      return {};
    }
  }

  /** The registration is gone: no lease, and register afresh at once. */
  #removed(): void {
    this.#info = null;
    this.#until = -Infinity;
    this.#note("registration_removed");
    this.#again = true;
  }

  #note(reason: string, error?: unknown): void {
    if (this.#lost) return;
    this.#lost = true;
    this.#log?.({
      msg: "lease_lost",
      reason,
      ...(error === undefined
        ? {}
        : { error: error instanceof Error ? error.name : typeof error }),
    });
  }
}

function hostname(): string {
  try {
    const state = Deno.permissions.querySync({ name: "sys", kind: "hostname" })
      .state;
    return state === "granted" ? Deno.hostname() : "";
  } catch {
    return "";
  }
}
