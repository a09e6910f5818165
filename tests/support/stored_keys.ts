/**
 * Keys put straight into a store, as the console would put them, for tests
 * that drive the library rather than the `keys` task.
 *
 * @module
 */

import { generateApiKey } from "../../lib/auth/api_key.ts";
import type { KeyRecord, KeyStore } from "../../lib/store/types.ts";

/** A key and the record the store keeps for it. */
export interface StoredKey {
  key: string;
  record: KeyRecord;
}

/**
 * A fresh key stored under `name` (e-mail `NAME@example.com` unless given),
 * lapsing at `expiresAt` when given, revoked at once when `revoked` is set;
 * changes are made as actor "test".
 */
export async function storeKey(
  store: KeyStore,
  name: string,
  options: { email?: string; revoked?: boolean; expiresAt?: string | null } =
    {},
): Promise<StoredKey> {
  const fresh = generateApiKey();
  let record = await store.create({
    name,
    email: options.email ?? `${name}@example.com`,
    hash: fresh.hash,
    hint: fresh.hint,
    ...(options.expiresAt === undefined
      ? {}
      : { expiresAt: options.expiresAt }),
  }, { actor: "test" });
  if (options.revoked) {
    record = (await store.revoke(record.id, { actor: "test" })).record;
  }
  return { key: fresh.key, record };
}
