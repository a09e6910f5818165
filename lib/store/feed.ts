/**
 * The change feed, written once over any backend: which keys changed after
 * a revision, and when a reader must forget everything instead (from -1, an
 * import since, or too many to name). A backend only reads the audit log's
 * tail (lib/store/backend.ts, `auditSince`).
 *
 * @module
 */

import type { StoreBackend } from "./backend.ts";
import type { KeyChanges } from "./types.ts";

/** Beyond this many changed keys a reader forgets everything instead. */
const MAX_CHANGES = 1000;

/**
 * Which keys changed after `revision`, read from the audit log; a first use
 * from a network and an exposure in a URL alter nothing a request reads,
 * so they are left out.
 */
export async function changesIn(
  backend: StoreBackend,
  revision: bigint,
): Promise<KeyChanges> {
  const tail = await backend.auditSince(revision < 0n ? -1n : revision, {
    limit: MAX_CHANGES,
  });
  const rebuild = { revision: tail.revision, keyIds: [], rebuild: true };
  // Ids may have been reused by an import: nothing known before it holds.
  if (revision < 0n || tail.replaced) return rebuild;
  const keyIds = new Set<number>();
  for await (const id of tail.keyIds) {
    keyIds.add(id);
    if (keyIds.size > MAX_CHANGES) return rebuild;
  }
  if (!tail.complete) return rebuild;
  return { revision: tail.revision, keyIds: [...keyIds], rebuild: false };
}
