/**
 * The PostgreSQL pool, its settings and time limits, and outage detection:
 * the one place a driver error becomes {@linkcode StoreUnavailableError}.
 * @module
 */

import postgres from "postgres";
import { bounded, DeadlineError } from "../../util/bounded.ts";
import { StoreInputError, StoreUnavailableError } from "../errors.ts";

/** Tuning of the connection pool and its time limits. */
export interface PostgresStoreOptions {
  /** Connections the pool may open; 10 unless set. */
  maxConnections?: number;
  /** Seconds to wait for a new connection; 3 unless set. */
  connectTimeoutSeconds?: number;
  /** Milliseconds a request-path read may take before it fails as unavailable; 2000. */
  readTimeoutMs?: number;
  /** Milliseconds any other call may take before it fails as unavailable; 15000 unless set. */
  timeoutMs?: number;
  /** Milliseconds the server lets one statement run or wait for a lock; 5000 unless set. */
  statementTimeoutMs?: number;
}

export type Sql = postgres.Sql;
export type Tx = postgres.TransactionSql;

/** How long a cancelled transaction may take to end: cancel and rollback, two round trips. */
const CANCEL_GRACE_MS = 2000;

/** A statement asked for after its transaction was given up on: never sent. */
class AbandonedError extends Error {
  override name = "AbandonedError";
}

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
  // Every setting is given, even defaults: the driver reads a PG* variable
  // for each one left out, which the tasks' --allow-env would refuse.
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
 * The pool with the store's time limits: every query goes through
 * {@linkcode Pool.read} or {@linkcode Pool.call}, which judge outages.
 */
export class Pool {
  readonly sql: Sql;
  #readTimeoutMs: number;
  #timeoutMs: number;
  #pendingReads = 0;

  constructor(sql: Sql, options: PostgresStoreOptions) {
    this.sql = sql;
    this.#readTimeoutMs = options.readTimeoutMs ?? 2000;
    this.#timeoutMs = callTimeoutMs(options);
  }

  /** A request-path read: any failure or timeout is an outage, never "no such key". */
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
   * Any other call of one statement ({@linkcode Pool.transaction} for
   * several): a lost connection or a timeout is an outage; other errors pass.
   */
  async call<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await bounded(work(), this.#timeoutMs);
    } catch (error) {
      throw asUnavailable(error, "The key store cannot be used");
    }
  }

  /**
   * A change in one transaction, under the call's time limit. One given up
   * on is not left running: its statement is cancelled, no further one is
   * sent, and it is waited for until it ends, so what the caller says next
   * about the store is what the store holds (left running, a rotation stalled
   * by row locks once committed after the console said it did not).
   *
   * Resolves when committed, however late; rejects with `change_cancelled`
   * when given up on before its commit was sent (rolled back, or bound to
   * roll back as no commit follows), and with `change_unconfirmed` only when
   * its end cannot be known (no answer, or a broken connection, after the
   * commit was sent).
   */
  async transaction<T>(
    work: (tx: Tx) => Promise<T>,
    options: { timeoutMs?: number | null } = {},
  ): Promise<T> {
    const timeoutMs = options.timeoutMs === undefined
      ? this.#timeoutMs
      : options.timeoutMs;
    let abandoned = false;
    let workDone = false;
    let current: { cancel(): unknown } | null = null;
    const pending = this.sql.begin(async (tx) => {
      const guarded = new Proxy(tx, {
        apply(target, self, args) {
          if (abandoned) throw new AbandonedError("transaction given up on");
          const query = Reflect.apply(target, self, args);
          current = query;
          return query;
        },
      });
      const result = await work(guarded);
      // The driver sends COMMIT once this resolves: never for a transaction
      // given up on, whose statement may end only after the cancel's grace
      // (a slow database), when the caller has said nothing was stored.
      if (abandoned) throw new AbandonedError("transaction given up on");
      // From here on the driver sends COMMIT: a failure may follow a commit.
      workDone = true;
      return result;
    }) as Promise<T>;
    try {
      return timeoutMs === null
        ? await pending
        : await bounded(pending, timeoutMs);
    } catch (error) {
      if (!(error instanceof DeadlineError)) {
        throw ended(error, { committing: workDone });
      }
    }
    abandoned = true;
    // Whether COMMIT had been sent: if not, none ever is (above).
    const committing = workDone;
    try {
      // The driver cancels on a connection of its own, past a full pool or a
      // lock wait; not awaited, as a database not answering would hold it up.
      Promise.resolve((current as { cancel(): unknown } | null)?.cancel())
        .catch(() => {});
      return await bounded(pending, CANCEL_GRACE_MS);
    } catch (error) {
      if (error instanceof DeadlineError && !committing) {
        // Still running, but it can only roll back: nothing changed.
        throw cancelled(error, timeoutMs);
      }
      if (error instanceof DeadlineError) {
        throw new StoreUnavailableError(
          "change_unconfirmed",
          `The key store did not answer within ${timeoutMs} ms, so a change may or may not have been made`,
          { cause: error, timeoutMs: timeoutMs ?? undefined },
        );
      }
      const outcome = ended(error, { committing: workDone });
      // A refusal the work reached before the cancel took effect is its answer.
      if (outcome instanceof StoreInputError) throw outcome;
      if (
        outcome instanceof StoreUnavailableError &&
        outcome.code === "change_unconfirmed"
      ) throw outcome;
      throw cancelled(error, timeoutMs);
    }
  }

  /** Closes every connection, waiting at most `seconds` for queries to end. */
  async end(seconds: number): Promise<void> {
    await this.sql.end({ timeout: seconds });
  }
}

/** A change given up on before its commit was sent: nothing changed. */
function cancelled(
  cause: unknown,
  timeoutMs: number | null,
): StoreUnavailableError {
  return new StoreUnavailableError(
    "change_cancelled",
    `The key store did not finish the change within ${timeoutMs} ms, so it was cancelled and nothing changed; check that PostgreSQL is running and that no session sits idle in a transaction holding the store's commit lock (pg_stat_activity shows it), then try again`,
    { cause, timeoutMs: timeoutMs ?? undefined },
  );
}

/**
 * What a transaction's failure says about the store. A failure before the
 * commit was sent, or one the server answered, left nothing behind; a
 * broken connection once the commit was sent may have come after it.
 */
function ended(error: unknown, options: { committing: boolean }): unknown {
  if (
    options.committing && error instanceof Error &&
    !(error instanceof postgres.PostgresError) && isOutage(error)
  ) {
    return new StoreUnavailableError(
      "change_unconfirmed",
      `The key store's connection broke while a change was committing, so it may or may not have been made: ${error.message}`,
      { cause: error },
    );
  }
  return asUnavailable(error, "The key store cannot be used");
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

/** Where DATABASE_URL points, as an opening's failure names it. */
interface Target {
  user: string;
  database: string;
  address: string;
}

/** What is wrong and the fix, by SQLSTATE or socket code, for a database that won't open. */
const OPEN_FAILURES: Record<string, (target: Target) => string> = {
  // invalid_authorization_specification: no such role, or pg_hba.conf.
  "28000": ({ user }) =>
    `PostgreSQL does not let user ${user} connect (no such role, or no pg_hba.conf entry for it): create the role (createuser ${user}), allow it in pg_hba.conf, or fix the user in DATABASE_URL`,
  // invalid_password
  "28P01": ({ user }) =>
    `PostgreSQL refused the password of user ${user}: fix the password in DATABASE_URL, or set it with ALTER ROLE ${user} PASSWORD`,
  // invalid_catalog_name
  "3D000": ({ user, database }) =>
    `PostgreSQL has no database ${database}: create it (createdb -O ${user} ${database}) or fix the database in DATABASE_URL`,
  ECONNREFUSED: ({ address }) =>
    `Nothing accepts connections at ${address}, where DATABASE_URL points: start PostgreSQL there, or fix the host and port in DATABASE_URL`,
};

/**
 * Why the database at `url` could not be opened, by code, in one sentence
 * naming DATABASE_URL and the fix (never the password); any other failure as
 * {@linkcode asUnavailable} words it.
 */
export function openFailure(error: unknown, url: string): unknown {
  const code = error instanceof Error
    ? (error as { code?: unknown }).code
    : undefined;
  // A server's code only from the server, a socket's only from the driver.
  const known = typeof code === "string" &&
    Object.hasOwn(OPEN_FAILURES, code) &&
    (error instanceof postgres.PostgresError) === /^[0-9]/.test(code);
  if (!known) return asUnavailable(error, "The key store cannot be opened");
  const parsed = new URL(url);
  const name = (text: string) =>
    /^[\w.-]+$/.test(text) ? text : JSON.stringify(text);
  const user = decodeURIComponent(parsed.username);
  return new StoreUnavailableError(
    "store_unavailable",
    OPEN_FAILURES[code]({
      user: name(user),
      database: name(decodeURIComponent(parsed.pathname.slice(1)) || user),
      address: `${parsed.hostname}:${parsed.port || 5432}`,
    }),
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
