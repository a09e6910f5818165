/**
 * The API-key authentication step that every authenticated route runs, in
 * this order, owned here and nowhere else:
 *
 * 1. the key's format, then its hash, the index of stored hashes and the
 *    lookup, from memory under this process's lease (lib/auth/key_lookup.ts);
 * 2. a key used from outside its `allowFrom` fails exactly as an invalid
 *    key does (same 401, counted toward the lock-out), logged and noted on
 *    the key (lib/usage/networks.ts);
 * 3. a request that failed meets the lock-out: 429 while its client is
 *    locked, else the failure is counted and answered 401;
 * 4. a key with a rate limit takes one request from this server's share
 *    of it (lib/auth/rate_limit.ts, lib/auth/peers.ts), in memory: past it,
 *    429 `rate_limited` with `Retry-After`, never counted toward the
 *    lock-out; within it, the `RateLimit` fields for the route's answer;
 * 5. a success is noted (last used, the network) and the key's record
 *    handed to the route.
 *
 * The lock-out comes after the key because it exists for clients that
 * retry a failing request: it answers only requests that fail anyway, so
 * no lock (earned, shared with a network, or false under a flood that
 * fills its tables) ever refuses a valid key. What that costs under a
 * flood, and why the key's entropy and not the lock-out bounds guessing,
 * is in docs/design.md ("Lock-out levels").
 *
 * Every outcome is counted by route. A route never sees a request whose key
 * was not valid at the moment the request was checked.
 *
 * @module
 */

import { lockoutKey } from "../net/client_address.ts";
import {
  type AuthFailure,
  type AuthResult,
  KeyLookup,
} from "../auth/key_lookup.ts";
import type { LastUsedRecorder } from "../usage/last_used.ts";
import type { Lease } from "../auth/lease.ts";
import {
  DEFAULT_LOCKOUT,
  type LockEvent,
  LockoutTracker,
} from "../auth/lockout.ts";
import { Retirements } from "../auth/retirement.ts";
import { RateLimiter } from "../auth/rate_limit.ts";
import type { Peers } from "../auth/peers.ts";
import { rateLimitHeaders } from "./rate_limit_headers.ts";
import { StoreUnavailableError } from "../store/errors.ts";
import type { KeyRecord, KeyStore } from "../store/types.ts";
import { counterOf } from "../store/records.ts";
import type { BackgroundWrites } from "../util/background.ts";
import { countOutcome } from "./telemetry.ts";
import { allowedFrom, type UsageRecorder } from "../usage/networks.ts";
import {
  API_KEY_HEADER,
  keyInUrl,
  lockedOut,
  rateLimited,
  unauthorized,
} from "./responses.ts";

/** What the step decided: the key's record, or the response to send instead. */
export type AuthDecision =
  | {
    ok: true;
    key: KeyRecord;
    /** Fields for the route's answer: the key's `RateLimit` ones, if any. */
    headers?: [string, string][];
  }
  | { ok: false; response: Response };

/** Options of {@linkcode createAuthenticator}. */
export interface AuthenticatorOptions {
  /** Default: the configuration's defaults (DEFAULT_LOCKOUT in lib/auth/lockout.ts). */
  lockout?: LockoutTracker;
  /** Notes which keys are used; written off the request path. */
  lastUsed?: LastUsedRecorder;
  /** Notes networks used and uses refused; written off the request path. */
  usage?: UsageRecorder;
  /** Receives a line per lock, per key found exposed in a URL and per use refused by `allowFrom`. */
  log?: (fields: Record<string, unknown>) => void;
  /** This process's lease, under which keys are looked up from memory. */
  lease?: Lease;
  /** Counts the writes made off the request path, for a stop to wait for. */
  background?: BackgroundWrites;
  /** The clock, in milliseconds: Date.now unless set; tests pin it. */
  now?: () => number;
  /** Counts requests of keys with a rate limit; default one of its own. */
  rateLimiter?: RateLimiter;
  /**
   * The servers sharing the store, whose count splits each limit; without
   * it this server enforces the whole limit, as if alone.
   */
  peers?: Pick<Peers, "count" | "share">;
}

/** The step, bound to one store. */
export interface Authenticator {
  /** Authenticates a request from `client` (its address) on `route`. */
  check(
    request: Request,
    context: { client: string; route: string },
  ): AuthDecision | Promise<AuthDecision>;
  /**
   * Refuses a request with a credential in its URL: 429 when the client is
   * locked out, else 400, counted as a failure toward the lock-out. Each
   * valid key among `candidates` is marked exposed off the request path, so
   * the answer's timing tells nothing about which keys are valid.
   */
  refuseKeyInUrl(
    candidates: string[],
    context: { client: string; route: string },
  ): Response;
}

/** Builds the authentication step over a store. */
export function createAuthenticator(
  store: KeyStore,
  options: AuthenticatorOptions = {},
): Authenticator {
  const lockout = options.lockout ?? new LockoutTracker(DEFAULT_LOCKOUT);
  const now = options.now ?? Date.now;
  const lookup = new KeyLookup(store, { lease: options.lease, now });
  lookup.warm().catch(() => {});
  const { lastUsed, usage, log, background, peers } = options;
  const limiter = options.rateLimiter ?? new RateLimiter();
  const retirements = new Retirements(store, {
    background,
    onError: (error) =>
      log?.({
        msg: "error",
        error: error instanceof Error ? error.name : typeof error,
      }),
  });

  const refuseLocked = (
    counted: string,
    route: string,
  ): { ok: false; response: Response } => {
    countOutcome("locked_out", route);
    return { ok: false, response: lockedOut(lockout.retryAfter(counted)) };
  };

  return {
    check(request, context) {
      const result = lookup.authenticate(request.headers.get(API_KEY_HEADER));
      // Without a promise in the steady state: see KeyLookup.authenticate.
      return result instanceof Promise
        ? result.then((found) => decide(found, context))
        : decide(result, context);
    },

    refuseKeyInUrl(candidates, { client, route }) {
      const counted = lockoutKey(client);
      if (lockout.retryAfter(counted) > 0) {
        return refuseLocked(counted, route).response;
      }
      countOutcome("url_exposed", route);
      noteLock(lockout.fail(counted), client);
      const write = noteExposure(candidates, client).catch((error) => {
        log?.({
          msg: "error",
          error: error instanceof Error ? error.name : typeof error,
        });
      });
      background?.track(write);
      return keyInUrl();
    },
  };

  /** Steps 2 to 5, once the key is looked up. */
  function decide(
    result: AuthResult,
    { client, route }: { client: string; route: string },
  ): AuthDecision | Promise<AuthDecision> {
    if (!result.ok) {
      if (result.reason === "expired") retirements.lapsed(result.record);
      return refuseFailed(result.reason, { client, route });
    }
    const record = result.record;
    // Refused before a first use can retire anything: a key used from
    // outside its ranges has not been used.
    if (!allowedFrom(record, client)) {
      return refuseFailed("address", { client, route, keyId: record.id });
    }
    let headers: [string, string][] | undefined;
    const limit = record.rateLimit;
    if (limit !== null) {
      // After every check of the key, so that only a valid key's request
      // is counted, and a refusal here is never a failed authentication.
      // The two keys of a rotation's overlap count apart: counted together,
      // whoever holds the old key (a leaked one, most often the reason to
      // rotate) could use up the budget and keep the new key refused. A
      // line of rotations shares two counts (lib/store/records.ts,
      // counterOf), so it never gets more than twice its limit.
      const counter = counterOf(record);
      const decision = limiter.take(counter, limit, {
        share: peers === undefined ? limit.count : peers.share(limit, counter),
        scale: peers?.count ?? 1,
      });
      headers = rateLimitHeaders(limit, decision);
      if (!decision.ok) {
        countOutcome("rate_limited", route);
        return {
          ok: false,
          response: rateLimited(decision.retryAfterSeconds, headers),
        };
      }
    }
    // Before the success is answered, so that the old key is refused on
    // every instance from the next request on.
    if (record.retires !== null) {
      return retirements.firstUse(record).then(() => {
        // The cached record still holds the spent link; kept, it would
        // make every later request of the key try the retirement again.
        lookup.forget(record.id);
        return succeed(record, { client, route }, headers);
      });
    }
    return succeed(record, { client, route }, headers);
  }

  function succeed(
    record: KeyRecord,
    { client, route }: { client: string; route: string },
    headers: [string, string][] | undefined,
  ): AuthDecision {
    countOutcome("ok", route);
    const at = now();
    lastUsed?.used(record.id, at);
    usage?.used(record.id, lockoutKey(client), at);
    return { ok: true, key: record, headers };
  }

  /**
   * A request that would fail whatever the lock-out says: 429 while its
   * client is locked, else counted toward the lock and answered 401, the
   * same for every reason so the caller learns nothing.
   */
  function refuseFailed(
    reason: AuthFailure | "address",
    { client, route, keyId }: { client: string; route: string; keyId?: number },
  ): { ok: false; response: Response } {
    const counted = lockoutKey(client);
    if (lockout.retryAfter(counted) > 0) return refuseLocked(counted, route);
    if (keyId !== undefined) {
      usage?.refused(keyId, client, now());
      log?.({ msg: "key_refused_from_address", apiKeyId: keyId, client });
    }
    noteLock(lockout.fail(counted), client);
    countOutcome(
      reason === "revoked" || reason === "expired"
        ? "revoked"
        : reason === "address"
        ? "address_refused"
        : "invalid",
      route,
    );
    return { ok: false, response: unauthorized() };
  }

  async function noteExposure(
    candidates: string[],
    client: string,
  ): Promise<void> {
    for (const candidate of candidates) {
      try {
        const result = await lookup.authenticate(candidate);
        if (!result.ok) continue;
        const marked = await store.markExposed(result.record.id, {
          actor: "server",
          from: client,
        });
        if (marked) {
          log?.({
            msg: "key_exposed_in_url",
            apiKeyId: result.record.id,
            client,
          });
        }
      } catch (error) {
        // The request was refused either way; a store hiccup is not news.
        if (!(error instanceof StoreUnavailableError)) throw error;
      }
    }
  }

  function noteLock(lock: LockEvent | null, client: string): void {
    if (!lock) return;
    log?.({
      msg: "lockout",
      scope: lock.scope,
      client: lock.scope === "address" ? client : lock.client,
      failures: lock.failures,
      lockedUntil: lock.lockedUntil.toISOString(),
    });
  }
}
