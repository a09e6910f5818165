/**
 * An installation's key line: its keys across rotations, each replaced by the
 * next, and all their audit log. A rotation is logged once, under the key it
 * replaced, so a new key's history starts in its predecessor's lines;
 * following the line gives one history whichever of its ids is asked about.
 * @module
 */

import { AUDIT_DETAIL } from "./records.ts";
import type { AuditEntry, KeyStore } from "./types.ts";

/**
 * The audit log of the key line that `keyId` belongs to, oldest first:
 * every change to any of its keys (creation, rotations, revocation,
 * exposure) and the imports that brought its keys in. Reads the log twice,
 * first to link the rotations, then to stream the line's entries.
 */
export async function* keyLineAudit(
  store: Pick<KeyStore, "audit">,
  keyId: number,
  /** `onLine` receives the line's ids, oldest first, before any entry. */
  options: { onLine?: (ids: number[]) => void } = {},
): AsyncIterable<AuditEntry> {
  const ids = await lineOf(store, keyId);
  options.onLine?.(ids);
  const members = new Set(ids);
  // Imports logged before the line's first entry brought its keys in only
  // when the line's history does not start with their creation (a file
  // that held the keys but not their first lines); otherwise they predate it.
  let earlier: AuditEntry[] | null = [];
  for await (const entry of store.audit()) {
    if (members.has(entry.keyId)) {
      if (earlier !== null && entry.action !== "create") yield* earlier;
      earlier = null;
      yield entry;
    } else if (entry.action === "import") {
      if (earlier === null) yield entry;
      else earlier.push(entry);
    }
  }
  if (earlier !== null) yield* earlier;
}

/** The ids of `keyId`'s line, oldest first, from the log's rotation lines. */
async function lineOf(
  store: Pick<KeyStore, "audit">,
  keyId: number,
): Promise<number[]> {
  const next = new Map<number, number>();
  const previous = new Map<number, number>();
  for await (const entry of store.audit()) {
    if (entry.action !== "rotate") continue;
    const replacement = AUDIT_DETAIL.replacementOf(entry.detail);
    // A hand-edited import could link a key twice: the first link holds.
    if (
      replacement === null || next.has(entry.keyId) ||
      previous.has(replacement)
    ) continue;
    next.set(entry.keyId, replacement);
    previous.set(replacement, entry.keyId);
  }
  const seen = new Set([keyId]);
  let first = keyId;
  for (let id = previous.get(first); id !== undefined && !seen.has(id);) {
    seen.add(id);
    first = id;
    id = previous.get(id);
  }
  const line = new Set([first]);
  for (let id = next.get(first); id !== undefined && !line.has(id);) {
    line.add(id);
    id = next.get(id);
  }
  return [...line];
}
