/**
 * Authentication of a request by its `X-API-Key` header.
 *
 * The order is the point: the cheap synchronous format check refuses
 * malformed values before any hashing or store read, and only a well-formed
 * key costs a hash and one strongly consistent lookup.
 *
 * @module
 */

import { hashApiKey, isWellFormedApiKey } from "./api_key.ts";
import type { KeyRecord, KeyStore } from "./store.ts";

/** The name of the header that carries the key. */
export const API_KEY_HEADER = "X-API-Key";

/** Why a request was not authenticated; never shown to the caller. */
export type AuthFailure = "missing" | "malformed" | "unknown" | "revoked";

/** The outcome of {@linkcode authenticate}. */
export type AuthResult =
  | { ok: true; record: KeyRecord }
  | { ok: false; reason: AuthFailure };

/**
 * Authenticates the value of the `X-API-Key` header against the store.
 * Throws {@linkcode StoreUnavailableError} when the store cannot be read, so
 * that an outage is never mistaken for a bad key.
 */
export async function authenticate(
  store: KeyStore,
  header: string | null,
): Promise<AuthResult> {
  if (header === null || header === "") return { ok: false, reason: "missing" };
  // A repeated header arrives folded as "a, b" and fails here too.
  if (!isWellFormedApiKey(header)) return { ok: false, reason: "malformed" };
  const record = await store.findByHash(hashApiKey(header));
  if (record === null) return { ok: false, reason: "unknown" };
  if (record.status !== "valid") return { ok: false, reason: "revoked" };
  return { ok: true, record };
}
