/**
 * What a change is, by type: whether it alters what authenticates, its audit
 * lines, and the {@linkcode Committed} it hands back, whose result is reached
 * only as its kind allows, so the compiler, not a list of method names, holds
 * each change to its wait (lib/store/acknowledged.ts).
 * @module
 */

import type { AuditEntry, InstanceRecord } from "./types.ts";

/**
 * What a change can alter. `authentication`: what a request reads (a key
 * created, revoked, rotated, retired, restricted, or the whole set
 * replaced by an import); every server must drop what it replaced before
 * the change returns. `usage`: notes a request does not read (a first use
 * from a network, a key seen in a URL): they may move the revision, as
 * every audit line does, but no server drops anything for them.
 */
export type Alters = "authentication" | "usage";

/** The audit actions of changes that alter only usage, which the change feed leaves out. */
export const QUIET_ACTIONS = ["network", "expose"] as const;
type QuietAction = typeof QUIET_ACTIONS[number];

/**
 * One audit line a change of kind `A` writes; the store adds the time and
 * numbers it by the revision it moves to. A usage change cannot write a
 * line that the change feed would carry, nor an authentication change one
 * that it would leave out.
 */
export type AuditLine<A extends Alters = Alters> =
  & Omit<AuditEntry, "at" | "action">
  & {
    action: A extends "usage" ? QuietAction
      : Exclude<AuditEntry["action"], QuietAction>;
  };

/** The store methods whose changes alter what authenticates. */
export type AuthenticationChange =
  | "create"
  | "revoke"
  | "rotate"
  | "retire"
  | "setAllowFrom"
  | "setRateLimit"
  | "importAll"
  | "abortImport";

/** A change's declaration: which method makes it, and what it alters. */
export interface ChangeKind<A extends Alters> {
  readonly name: A extends "authentication" ? AuthenticationChange
    :
      | "markExposed"
      | "recordNetworkUses"
      | "recordRefusedUses"
      | "noteRateLimited"
      | "noteExpiring";
  readonly alters: A;
}

/**
 * A server that did not acknowledge, its lease run out instead; `gone`: seen
 * owing, then its registration gone (it stopped, or another wait saw its lease
 * run out first); `broken`: a registration that could not be read.
 */
export type Lapsed = Pick<InstanceRecord, "id" | "host" | "pid" | "broken"> & {
  gone?: true;
};

/** How a wait for the servers went, for progress lines and the benchmark. */
export interface AcknowledgeReport {
  /** The revision every server now knows or no longer vouches for. */
  revision: bigint;
  /** Milliseconds from the change's return to the end of the wait. */
  waitedMs: number;
  /** The servers waited for. */
  servers: number;
  /** Those whose lease ran out rather than acknowledge. */
  lapsed: Lapsed[];
  /** The wait was ended early: the change is made, not yet acknowledged everywhere. */
  interrupted: boolean;
  /** When interrupted: the servers that still owed an acknowledgement. */
  owing: Lapsed[];
  /** When interrupted: milliseconds until the lease of every server owing has run out. */
  remainingMs: number;
}

/** A change was made, but the wait for its acknowledgements was interrupted (Ctrl-C). */
export class WaitInterruptedError extends Error {
  override name = "WaitInterruptedError";
  /** The store method that made the change: "revoke", "rotate" … */
  readonly change: AuthenticationChange;
  /** What that method returned. */
  readonly result: unknown;
  readonly report: AcknowledgeReport;

  constructor(
    change: AuthenticationChange,
    result: unknown,
    options: { report: AcknowledgeReport },
  ) {
    super(`The ${change} is made; its wait for servers was interrupted`);
    this.change = change;
    this.result = result;
    this.report = options.report;
  }
}

/**
 * How a store settles a change that alters authentication: resolves once it
 * may return (with the wait's report), or at once when nobody waits (a
 * store opened for tests, or a tool that runs beside no server).
 */
export type Acknowledge = (
  change: Committed<unknown, "authentication">,
) => Promise<AcknowledgeReport | null>;

/**
 * A change the store committed (or found already made): its kind, the
 * revision after it, and its result, kept private: an authentication change's
 * reached only through {@linkcode Committed.settle}, which waits as the store
 * was told to; a usage change's through {@linkcode Committed.quiet}, which the
 * compiler refuses on an authentication change.
 */
export class Committed<T, A extends Alters> {
  readonly kind: ChangeKind<A>;
  /**
   * The store's revision once the change was made: every server that has
   * acknowledged it knows the change. When the change found nothing to do,
   * the last change that altered the records it read (at most the revision
   * it read), so that a repeated revocation still waits for the first one
   * to be known everywhere, and for nothing else.
   */
  readonly revision: bigint;
  readonly #value: T;

  constructor(kind: ChangeKind<A>, revision: bigint, value: T) {
    this.kind = kind;
    this.revision = revision;
    this.#value = value;
  }

  /** The result of a change that alters only usage: nothing to wait for. */
  quiet(this: Committed<T, "usage">): T {
    return this.#value;
  }

  /**
   * An authentication change's result, once `acknowledge` resolved;
   * {@linkcode WaitInterruptedError} (with it) if interrupted.
   */
  async settle(
    this: Committed<T, "authentication">,
    acknowledge: Acknowledge,
  ): Promise<T> {
    const report = await acknowledge(this);
    if (report?.interrupted) {
      throw new WaitInterruptedError(
        this.kind.name as AuthenticationChange,
        this.#value,
        { report },
      );
    }
    return this.#value;
  }
}

/** Settles without waiting: for a store no server reads from memory. */
export const NO_WAIT: Acknowledge = (): Promise<null> => Promise.resolve(null);
