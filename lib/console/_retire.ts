/**
 * Writes down the revocations that keys' lifetimes have already decided,
 * before a command reads or changes the store, so that names are free again
 * and the audit log says when and why. Nothing depends on it for safety:
 * the server refuses a key past its deadline at request time either way.
 * The rule and the write are lib/store/expiry.ts's, shared with the server.
 *
 * @module
 */

import { ImportStateError } from "../store/errors.ts";
import { retireDue as retireAll } from "../store/expiry.ts";
import type { KeyStore } from "../store/types.ts";

/** Who the audit log says revoked a key whose lifetime ended. */
export const EXPIRY_ACTOR = "expiry";

/** Revokes every valid key past its deadline; returns how many. */
export async function retireDue(store: KeyStore): Promise<number> {
  try {
    return await retireAll(store, { actor: EXPIRY_ACTOR });
  } catch (error) {
    // An unfinished import is the command's to report, with its fix.
    if (error instanceof ImportStateError) return 0;
    throw error;
  }
}
