/**
 * The PostgreSQL connection: the driver's pool and its settings, the time
 * limits of every call, and outage detection, the one place where a driver
 * error becomes {@linkcode StoreUnavailableError}.
 *
 * @module
 */

import postgres from "postgres";
import { bounded, DeadlineError } from "../../_bounded.ts";
import { StoreInputError, StoreUnavailableError } from "../errors.ts";

/** Tuning of the connection pool and its time limits. */
export interface PostgresStoreOptions {
  /** Connections the pool may open; 10 unless set. */
  maxConnections?: number;
  /** Seconds to wait for a new connection; 3 unless set. */
  connectTimeoutSeconds?: number;
  /**
   * Milliseconds a request-path read (`findByHash`, `findByHashAt`,
   * `revision`) may take before it fails as unavailable; 2000 unless set.
   */
  readTimeoutMs?: number;
  /** Milliseconds any other call may take before it fails as unavailable; 15000 unless set. */
  timeoutMs?: number;
  /** Milliseconds the server lets one statement run or wait for a lock; 5000 unless set. */
  statementTimeoutMs?: number;
}

/** The driver's pool. */
export type Sql = postgres.Sql;

/** Request-path reads allowed to wait at once, so that an outage cannot pile up work without bound. */
const MAX_PENDING_READS = 1000;

/** Settings the driver reads but its types leave out. */
const UNTYPED_SETTINGS = { sslnegotiation: null, max_pipeline: 100 };

/** Opens the driver's pool on the database at `url`; it connects on first use. */
export function connect(url: string, options: PostgresStoreOptions): Sql {
  const parsed = new URL(url);
  const query = parsed.searchParams;
  const sslmode = query.get("sslmode");
  const user = decodeURIComponent(parsed.username);
  const password = decodeURIComponent(parsed.password);
  const statementTimeout = options.statementTimeoutMs ?? 5000;
  // Every setting is given here, even the defaults: the driver reads a PG*
  // environment variable for each one left out, which the tasks' --allow-env
  // would refuse.
  return postgres(url, {
    user,
    pass: () => password,
    database: decodeURIComponent(parsed.pathname.slice(1)) || user,
    port: Number(parsed.port || 5432),
    max: options.maxConnections ?? 10,
    ssl: sslmode === null || sslmode === "disable"
      ? false
      : sslmode as "require" | "prefer" | "allow" | "verify-full",
    connect_timeout: options.connectTimeoutSeconds ?? 3,
    idle_timeout: 0,
    max_lifetime: 60 * 30,
    // The driver's own backoff grows to 20 s between attempts, which would
    // keep the service down long after the database is back.
    backoff: (attempt: number) => Math.min(0.05 * 2 ** attempt, 0.5),
    keep_alive: 30,
    prepare: true,
    debug: false,
    fetch_types: false,
    publications: "alltables",
    // Only a primary: reads must see every committed change.
    target_session_attrs: "read-write",
    onnotice: () => {},
    ...UNTYPED_SETTINGS,
    connection: {
      application_name: "integration-service",
      statement_timeout: statementTimeout,
      lock_timeout: statementTimeout,
      idle_in_transaction_session_timeout: 60_000,
    },
  });
}

/** Milliseconds any call but a request-path read may take, as `options` set it. */
export function callTimeoutMs(options: PostgresStoreOptions): number {
  return options.timeoutMs ?? 15_000;
}

/**
 * The pool with the store's time limits: every query of the store goes
 * through {@linkcode Pool.read} or {@linkcode Pool.call}, which decide when
 * a failure is an outage.
 */
export class Pool {
  /** The driver's pool, for the queries themselves. */
  readonly sql: Sql;
  #readTimeoutMs: number;
  #timeoutMs: number;
  #pendingReads = 0;

  constructor(sql: Sql, options: PostgresStoreOptions) {
    this.sql = sql;
    this.#readTimeoutMs = options.readTimeoutMs ?? 2000;
    this.#timeoutMs = callTimeoutMs(options);
  }

  /**
   * A request-path read: any failure, or no answer within the read timeout,
   * is an outage, never "no such key".
   */
  async read<T>(query: () => Promise<T>): Promise<T> {
    if (this.#pendingReads >= MAX_PENDING_READS) {
      throw new StoreUnavailableError(
        "store_overloaded",
        "The key store is not answering and too many reads are waiting on it",
      );
    }
    this.#pendingReads++;
    const pending = query();
    // Counted until the driver gives up, not when the caller does.
    pending.then(() => this.#pendingReads--, () => this.#pendingReads--);
    try {
      return await bounded(pending, this.#readTimeoutMs);
    } catch (error) {
      throw new StoreUnavailableError(
        "store_unavailable",
        "The key store cannot be read",
        { cause: error },
      );
    }
  }

  /**
   * Any other call: a lost connection or a timeout is an outage; other
   * errors pass. Without `timeoutMs` it waits as long as the server's own
   * statement timeouts let it.
   */
  async call<T>(
    work: () => Promise<T>,
    options: { timeoutMs?: number | null; writes?: boolean } = {},
  ): Promise<T> {
    const timeoutMs = options.timeoutMs === undefined
      ? this.#timeoutMs
      : options.timeoutMs;
    try {
      return timeoutMs === null
        ? await work()
        : await bounded(work(), timeoutMs);
    } catch (error) {
      if (error instanceof DeadlineError && options.writes) {
        throw new StoreUnavailableError(
          "change_unconfirmed",
          `The key store did not answer within ${timeoutMs} ms, so a change may or may not have been made`,
          { cause: error, timeoutMs: timeoutMs ?? undefined },
        );
      }
      throw asUnavailable(error, "The key store cannot be used");
    }
  }

  /** Closes every connection, waiting at most `seconds` for queries to end. */
  async end(seconds: number): Promise<void> {
    await this.sql.end({ timeout: seconds });
  }
}

/**
 * Turns a lost connection, a timeout or an overloaded server into
 * {@linkcode StoreUnavailableError}, worded for the operator who brings the
 * database back; every other error passes as it is.
 */
export function asUnavailable(error: unknown, what: string): unknown {
  if (
    !(error instanceof Error) || error instanceof StoreInputError ||
    error instanceof StoreUnavailableError || !isOutage(error)
  ) {
    return error;
  }
  return new StoreUnavailableError(
    "store_unavailable",
    `${what}: ${error.message}; check that PostgreSQL is running and that DATABASE_URL points at it, then try again`,
    { cause: error },
  );
}

/** Whether the driver or the server says the database is out of reach for now. */
function isOutage(error: Error): boolean {
  if (error instanceof DeadlineError) return true;
  const code = (error as { code?: unknown }).code;
  if (typeof code !== "string") return false;
  return error instanceof postgres.PostgresError
    // Connection exceptions, too many connections, timeouts and
    // shutdowns, lock waits, conflicts a retry would clear.
    ? /^(08|53|57|58)|^55P03$|^40001$|^40P01$/.test(code)
    // The driver's and the socket's own codes.
    : /^(CONNECT_TIMEOUT|CONNECTION_\w+|E[A-Z_]+)$/.test(code);
}
