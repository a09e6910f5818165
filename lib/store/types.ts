/**
 * The store's vocabulary and its {@linkcode KeyStore} contract: types only,
 * importing only types, so that any module may depend on it.
 * @module
 */

import type { WebhookStore } from "./webhook_types.ts";

/**
 * A per-key rate limit: `count` requests in any `windowSeconds`, enforced in
 * memory by each server (lib/auth/rate_limit.ts); cached with the record.
 */
export interface RateLimit {
  count: number;
  windowSeconds: number;
}

/** Everything kept about one key. The key itself is never part of it. */
export interface KeyRecord {
  /** 1, 2, 3 …: reported to the caller as `apiKeyId`. */
  id: number;
  /** Unique among valid keys, so the list stays readable. */
  name: string;
  /** The integrator's registration. */
  email: string;
  /** The two states of the specification: usable, or revoked for good. */
  status: "valid" | "revoked";
  /** SHA-256 of the key, hex. */
  hash: string;
  /** Prefix and last four characters, to recognise the key by. */
  hint: string;
  createdAt: string;
  revokedAt: string | null;
  revokedReason: string | null;
  /** When the key was first seen in a URL, where anyone along the way may have logged it. */
  exposedAt: string | null;
  /** The client address that sent it in the URL. */
  exposedFrom: string | null;
  /**
   * Last authentication: a real use's time, at most about a minute behind the
   * latest, never before `createdAt` (a server clock behind the console's is
   * shown `createdAt`). Only `get()`/`list()` fill it: it is stored apart.
   */
  lastUsedAt: string | null;
  /**
   * When a valid key stops authenticating, checked at request time: set at
   * creation, or as the deadline of a rotation's overlap. Null: never. A
   * key past it is revoked whether or not the store has written so yet.
   */
  expiresAt: string | null;
  /** On a rotated key: the id of its replacement (in an overlap, or revoked). */
  replacedBy: number | null;
  /** On a replacement: the key revoked when this one first authenticates; null once done. */
  retires: number | null;
  /** On a key made by a rotation: the id of the key it replaced. */
  rotatedFrom: number | null;
  /**
   * On a key of a rotation line: the line's first key, whose line count
   * (twice the limit) every key of the line takes from besides its own, so
   * a line is accepted at most twice its limit in any window (`lineRoot`).
   * Null on a key never rotated, and on the first key. Written by 1.1 it
   * named the predecessor's predecessor's count (null on the first
   * replacement): always a key of the same line, no later than this one.
   */
  rateCounter: number | null;
  /** Canonical CIDR ranges the key may be used from; null: anywhere. Cached with the record. */
  allowFrom: string[] | null;
  /** Requests allowed per window across every server; null: no limit. Cached with the record. */
  rateLimit: RateLimit | null;
  /** Last networks it authenticated from, oldest first; kept apart, filled by `get()`/`list()`. */
  networks: NetworkUse[];
  /** Uses refused by `allowFrom`, oldest first; kept apart, like `networks`. */
  refusedUses: RefusedUse[];
}

/** A network a key was used from: a /24 (IPv4) or /48 (IPv6) range. */
export interface NetworkUse {
  network: string;
  firstSeenAt: string;
  lastSeenAt: string;
}

/** A use of a key refused because the client was outside its `allowFrom`. */
export interface RefusedUse {
  address: string;
  at: string;
}

/** What the admin supplies for a new key, plus the hash of the generated secret. */
export interface NewKeyInput {
  name: string;
  email: string;
  hash: string;
  hint: string;
  /** When the key stops working; none when absent or null. */
  expiresAt?: string | null;
  /** Canonical ranges the key may be used from; null or absent: anywhere. */
  allowFrom?: string[] | null;
  /** The key's rate limit; null or absent: none. */
  rateLimit?: RateLimit | null;
}

/** One line of the audit log. */
export interface AuditEntry {
  at: string;
  action:
    | "create"
    | "revoke"
    | "rotate"
    | "expose"
    | "import"
    | "allow_from"
    | "rate_limit"
    | "network";
  keyId: number;
  /** Who did it: OS user and host for the console. */
  actor: string;
  detail: string | null;
}

/** Who performs a change, for the audit log. */
export interface ChangeOptions {
  actor: string;
}

export interface RevokeOptions extends ChangeOptions {
  reason?: string;
}

export interface RotateOptions extends ChangeOptions {
  /** Keep the old key valid until this ISO time, then revoke it, instead of now. */
  overlapUntil?: string;
  /** With `overlapUntil`: also retire the old key at the new one's first use. */
  untilFirstUse?: boolean;
}

export interface RetireOptions extends ChangeOptions {
  /** `deadline`: `id` expired. `first_use`: `id` authenticated, so revoke the key it `retires`. */
  cause: "deadline" | "first_use";
}

export interface ExposeOptions extends ChangeOptions {
  /** The client address the key came from: the one that sent it in a URL, or reported it. */
  from: string;
  /**
   * How it came to light: sent in a URL (`url`, the default), or reported as
   * found by anyone (`report`: POST /api/v1/keys/leaked).
   */
  source?: ExposureSource;
}

/** How a key came to be marked exposed; the audit line's actor and detail say it too. */
export type ExposureSource = "url" | "report";

/** One line of a backup: a key record or an audit line, in store order. */
export type ExportItem =
  | { type: "key"; record: KeyRecord }
  | { type: "audit"; entry: AuditEntry };

/** The result of a revocation: `changed` is false when the key was already revoked. */
export interface RevokeResult {
  record: KeyRecord;
  changed: boolean;
}

/** The result of a rotation: the revoked key and its replacement. */
export interface RotateResult {
  revoked: KeyRecord;
  created: KeyRecord;
  /** The old key's own predecessor, retired at once because it was still in its overlap. */
  retired: KeyRecord | null;
}

/**
 * One server process's registration, which every change waits on: its applied
 * revision and lease. The process answers from memory only while it stands.
 */
export interface InstanceInfo {
  /** Random, chosen by the process; a new one after every re-registration. */
  id: string;
  /** Where it runs, for the operator who sees it in a wait. */
  host: string;
  pid: number;
  startedAt: string;
  /** How long one lease lasts; a change waits at most this for the process. */
  leaseMs: number;
  /** Every change up to this revision has been applied by the process. */
  acked: bigint;
  /** The service version the process runs (lib/util/version.ts). */
  release?: string;
  /** What it served, as of its last renewal: for `keys status`. */
  figures?: ServerFigures;
}

/** Counts of answers, over some span of time. */
export interface TrafficFigures {
  requests: number;
  /** 200s of authenticated routes. */
  ok: number;
  /** 401s. */
  unauthorized: number;
  /** 429s of the lock-out. */
  lockedOut: number;
  /** 429s of a key's rate limit. */
  rateLimited: number;
  /** Distinct keys refused by their rate limit. */
  rateLimitedKeys: number;
}

/**
 * A server's figures, published with each lease renewal (no store write per
 * request): never a key, hash or e-mail address.
 */
export interface ServerFigures {
  /** When counted (ISO). */
  at: string;
  lastMinute: TrafficFigures;
  sinceStart: TrafficFigures;
  /** Addresses locked out now. */
  lockedAddresses: number;
}

/** A registration as stored, with the version that moves on every write of it. */
export interface InstanceRecord extends InstanceInfo {
  version: string;
  /**
   * Unreadable as stored (a field missing or malformed): the other fields are
   * placeholders, and it owes every change until removed.
   */
  broken?: boolean;
}

/** What changed after a revision: the keys to forget, or everything. */
export interface KeyChanges {
  /** The revision the answer is current to. */
  revision: bigint;
  /** Keys whose records changed (or were created) after the asked revision. */
  keyIds: number[];
  /** True when the keys cannot be told (an import, or too many): forget all. */
  rebuild: boolean;
}

/**
 * Where server processes register and acknowledge changes (see
 * docs/design.md, "Leases"). Writes of a registration are conditional on
 * its version, so a registration that a change gave up on and removed can
 * never be renewed: the process must register afresh, and read again.
 */
export interface InstanceRegistry {
  registerInstance(info: InstanceInfo): Promise<string>;
  /** Rewrites a registration still at `version`; its new version, or null when changed or gone. */
  renewInstance(info: InstanceInfo, version: string): Promise<string | null>;
  /** The revision and this registration's version (null: gone), in one consistent read. */
  pollInstance(
    id: string,
  ): Promise<{ revision: bigint; version: string | null }>;
  instances(): Promise<InstanceRecord[]>;
  /** Removes a registration, only if still at `version` when one is given. */
  removeInstance(id: string, options?: { version?: string }): Promise<boolean>;
  /**
   * Which keys changed after `revision`, from the audit log; a network's first
   * use and a URL exposure alter nothing a request reads, so are left out.
   */
  changesSince(revision: bigint): Promise<KeyChanges>;
  /**
   * When the store can push (PostgreSQL): calls `listener` soon after any
   * change, a hint only (notices may be lost); returns the stopper.
   */
  onChange?(listener: () => void): Promise<() => Promise<void>>;
}

/**
 * The store contract. Every change is atomic (the whole change and its audit
 * line, or nothing) and every read is strongly consistent, so a revocation
 * holds for the very next request in every process sharing the store.
 */
export interface KeyStore extends InstanceRegistry {
  /** The record whose hash matches, valid or revoked; null when none. */
  findByHash(hash: string): Promise<KeyRecord | null>;
  /** The record with this id, valid or revoked; null when none. */
  get(id: number): Promise<KeyRecord | null>;
  /** The valid key with this name (names are compared case-insensitively). */
  getByName(name: string): Promise<KeyRecord | null>;
  /** Records in id order, streamed; valid ones only unless `includeRevoked`. */
  list(options?: { includeRevoked?: boolean }): AsyncIterable<KeyRecord>;
  /** Ids of valid keys due at `now`, from an index: costs what is due, not the key count. */
  dueKeys(now: Date): AsyncIterable<number>;
  /** The valid keys in a rotation's overlap whose replacement is key `id`. */
  predecessors(id: number): AsyncIterable<KeyRecord>;
  /** Stores a new valid key under the next id. */
  create(input: NewKeyInput, options: ChangeOptions): Promise<KeyRecord>;
  /** Revokes a key; revoking a revoked key changes nothing. */
  revoke(id: number, options: RevokeOptions): Promise<RevokeResult>;
  /** Revokes a key and stores its replacement, same name and e-mail, in one step. */
  rotate(
    id: number,
    replacement: Pick<NewKeyInput, "hash" | "hint" | "expiresAt">,
    options: RotateOptions,
  ): Promise<RotateResult>;
  /**
   * Writes the revocation that a key's lifetime already decided (see
   * {@linkcode RetireOptions}); once only, audited under the revoked key.
   * `changed` is false when there was nothing to do.
   */
  retire(id: number, options: RetireOptions): Promise<RevokeResult>;
  /** The audit log, oldest first, streamed. */
  audit(options?: { keyId?: number }): AsyncIterable<AuditEntry>;
  /** The last change's number; any change moves it, so a cache at R is current while it is R. */
  revision(): Promise<bigint>;
  /**
   * `findByHash()` with the revision it read at, in one consistent read: what
   * a cache needs. `authRevision` is the last change, up to then, that altered
   * this key's authentication (not a usage note: a network's first use, a key
   * seen in a URL), which wrote every record it linked (an --until-first-use
   * rotation's old key) in the same commit, so a reader waits for the servers
   * to know that one only, not another key's later change. For a record
   * written without it (by version 1.1), or none found, the store's last
   * change that altered any key's authentication.
   */
  findByHashAt(
    hash: string,
  ): Promise<
    { record: KeyRecord | null; revision: bigint; authRevision: bigint }
  >;
  /**
   * Marks a key exposed, audited; true if this call wrote an audit line. Seen
   * in a URL: the first exposure only. Reported: every report of a valid key
   * is a line of its own (the record keeps its first exposure), none of a
   * revoked one.
   */
  markExposed(id: number, options: ExposeOptions): Promise<boolean>;
  /**
   * Raises `key.rate_limited` for key `id`, once per window of its limit
   * (the window holding `at`), whichever server asks; true if this call did.
   */
  noteRateLimited(id: number, at: Date): Promise<boolean>;
  /**
   * Raises `key.expiring` for key `id` once per reminder: when its deadline
   * is within one of `days` of `now`. The reminder's days, or null.
   */
  noteExpiring(
    id: number,
    options: { now: Date; days: readonly number[] },
  ): Promise<number | null>;
  /** The webhook endpoints and outbox (lib/store/webhooks.ts). */
  readonly webhooks: WebhookStore;
  /** Records when keys were last used. Best effort: no audit line, no revision. */
  recordLastUsed(uses: Iterable<{ id: number; at: Date }>): Promise<void>;
  /** Sets (null: clears) where a key may be used from, audited; `changed` false if so already. */
  setAllowFrom(
    id: number,
    allowFrom: string[] | null,
    options: ChangeOptions,
  ): Promise<{ record: KeyRecord; changed: boolean }>;
  /**
   * Sets (null: lifts) a rate limit, audited, on the key and on `partner`, the
   * other key of its rotation line still valid in an overlap (a line has one
   * limit; null when none, or it had that limit already); returns once every
   * server dropped the cached records.
   */
  setRateLimit(
    id: number,
    rateLimit: RateLimit | null,
    options: ChangeOptions,
  ): Promise<
    { record: KeyRecord; changed: boolean; partner: KeyRecord | null }
  >;
  /**
   * Merges network uses into each key's bounded list, apart from the record;
   * new networks are audited (`network`), moving the revision, and returned.
   * Best effort: unknown keys and a store under import are skipped.
   */
  recordNetworkUses(
    uses: Iterable<{ id: number; network: string; at: Date }>,
  ): Promise<{ id: number; network: string }[]>;
  /** Appends refused uses to each key's bounded list: no audit line, no revision, best effort. */
  recordRefusedUses(
    uses: Iterable<{ id: number; address: string; at: Date }>,
  ): Promise<void>;
  /** Every key record (hashes, never keys) and audit line, for a backup. */
  exportAll(): AsyncIterable<ExportItem>;
  /** Restores an export into an empty store (refusing any other), audited; all or nothing. */
  importAll(
    items: AsyncIterable<ExportItem>,
    options: ChangeOptions,
  ): Promise<{ keys: number; audit: number }>;
  /**
   * Every key, valid and revoked, with an id above `afterId`, in id order and
   * streamed in batches: what an in-memory index of the keys is built from.
   * Yields nothing while an import is unfinished, as no key authenticates then.
   */
  keyHashes(options?: { afterId?: number }): AsyncIterable<{
    id: number;
    hash: string;
  }>;
  /**
   * The revision at which the keys were last replaced wholesale (an import
   * began, completed, failed or was aborted); 0n if never. An index built at R
   * rebuilds from scratch once this exceeds R, as ids may have been reused.
   */
  importRevision(): Promise<bigint>;
  /**
   * Ends an unfinished import (interrupted, or running elsewhere, which then
   * fails), emptying the store; false when none was.
   */
  abortImport(options: ChangeOptions): Promise<boolean>;
  close(): Promise<void>;
}
