/**
 * Writes down the revocations that keys' lifetimes have already decided,
 * before a command reads or changes the store, so that names are free again
 * and the audit log says when and why. Nothing depends on it for safety:
 * the server refuses a key past its deadline at request time either way.
 *
 * @module
 */

import { ImportStateError } from "../store/errors.ts";
import type { KeyStore } from "../store/types.ts";

/** Who the audit log says revoked a key whose lifetime ended. */
export const EXPIRY_ACTOR = "expiry";

/**
 * Revokes every valid key past its deadline; returns how many. It reads the
 * store's index of deadlines, so it costs as much at 100,000 keys as at 10.
 */
export async function retireDue(store: KeyStore): Promise<number> {
  const due: number[] = [];
  try {
    for await (const id of store.dueKeys(new Date())) due.push(id);
    for (const id of due) {
      await store.retire(id, { actor: EXPIRY_ACTOR, cause: "deadline" });
    }
  } catch (error) {
    // An unfinished import is the command's to report, with its fix.
    if (error instanceof ImportStateError) return 0;
    throw error;
  }
  return due.length;
}
