/**
 * `keys revoke`: a key stops working at once and for good.
 *
 * @module
 */

import { recordAt } from "../store/expiry.ts";
import { normalizeReason } from "../store/records.ts";
import type { KeyRecord, KeyStore } from "../store/types.ts";
import {
  type Command,
  CONFIRM_NOTES,
  KEY_ARGUMENT,
  YES_OPTION,
} from "./command.ts";
import { checked } from "./_input.ts";
import { report } from "./_output.ts";
import { confirm } from "./_prompt.ts";
import { advice, describe, named, printRecord, resolve } from "./_records.ts";
import {
  inStore,
  OTHER_CHANGE,
  storeField,
  warnWithoutServer,
} from "./_store.ts";

export const revoke: Command = {
  summary: "revoke a key at once and for good",
  usage: "revoke KEY [--reason TEXT] [--yes]",
  options: {
    reason: {
      type: "string",
      help: "why: lost, leaked, decommissioned, person left",
    },
    yes: YES_OPTION,
  },
  positionals: [1, 1, KEY_ARGUMENT],
  notes: CONFIRM_NOTES,
  async run(ctx) {
    const { store, values, positionals, actor } = ctx;
    const reason = typeof values.reason === "string"
      ? checked(normalizeReason, values.reason)
      : undefined;
    const target = await resolve(store, positionals[0]);
    if (target.status === "valid") {
      await confirm({
        question: `Revoke key ${describe(target)}? ` +
          "The next request with it gets 401.",
        declined: `Key ${named(target)} was not revoked; ` +
          "answer y to revoke it, or pass --yes",
      }, { yes: values.yes === true, interactive: ctx.interactive });
    }
    const { record, changed } = await store.revoke(target.id, {
      actor,
      reason,
    });
    report(
      changed
        ? `Revoked key ${named(record)} ${
          inStore(ctx)
        }: the next request with it gets 401.`
        : `Key ${named(record)} was already revoked at ${record.revokedAt} ${
          inStore(ctx)
        }; nothing changed.`,
    );
    await warnWithoutServer(ctx, OTHER_CHANGE);
    // A key in a rotation's overlap gave its name to its replacement: revoking
    // by name revokes the replacement and leaves it working, which whoever
    // revokes a leaked key must hear of.
    for (const older of await stillWorking(store, record.id)) {
      report(
        `Key ${
          named(older)
        }, which key ${older.replacedBy} replaced, still works until ${older.expiresAt}; revoke it too if it must stop now: ${
          advice(["revoke", String(older.id)])
        }`,
      );
    }
    // As the store holds it after the change: get() fills in the usage
    // lists (last used, networks) that a revocation does not return.
    printRecord(ctx, (await store.get(record.id)) ?? record, storeField(ctx));
  },
};

/** The overlap keys leading to key `id`: its predecessor, that one's, and so on, newest first. */
async function stillWorking(
  store: KeyStore,
  id: number,
): Promise<KeyRecord[]> {
  // Read along the chain, not from a listing: the cost follows the chain.
  const now = Date.now();
  const found: KeyRecord[] = [];
  const seen = new Set<number>([id]);
  for (let next: number | undefined = id; next !== undefined;) {
    const replacing = next;
    next = undefined;
    for await (const listed of store.predecessors(replacing)) {
      const older = recordAt(listed, now);
      if (older.status !== "valid" || seen.has(older.id)) continue;
      seen.add(older.id);
      found.push(older);
      next = older.id;
    }
  }
  return found;
}
