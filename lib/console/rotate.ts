/**
 * `keys rotate`: a replacement delivered so stdout never holds a key the store does not.
 *
 * @module
 */

import { generateApiKey } from "../auth/api_key.ts";
import { KeyCollisionError, StoreUnavailableError } from "../store/errors.ts";
import {
  AUDIT_DETAIL,
  overlappedPredecessor,
  publicRecord,
} from "../store/records.ts";
import type {
  KeyRecord,
  KeyStore,
  RotateOptions,
  RotateResult,
} from "../store/types.ts";
import { WaitInterruptedError } from "../store/acknowledged.ts";
import {
  type Command,
  CONFIRM_NOTES,
  KEY_ARGUMENT,
  YES_OPTION,
} from "./command.ts";
import {
  made,
  refuseDiscardingStdout,
  STORE_WARNING,
  writeFailure,
} from "./_delivery.ts";
import { ConsoleError, failure } from "./errors.ts";
import { jsonText, report, visible } from "./_output.ts";
import { confirm } from "./_prompt.ts";
import {
  advice,
  describe,
  insteadOfRevoked,
  named,
  newestOfLine,
  resolve,
} from "./_records.ts";
import { fromNow, requestedExpiry } from "./_input.ts";
import { inStore, NEW_KEY, storeField, warnWithoutServer } from "./_store.ts";

export const rotate: Command = {
  summary: "revoke a key and generate its replacement in one step",
  usage: "rotate KEY [--overlap DURATION] [--until-first-use] [--yes]",
  options: {
    overlap: {
      type: "string",
      help:
        "keep the old key working this long (60s, 15m, 2h, 7d), then revoke it",
    },
    "until-first-use": {
      type: "boolean",
      help: "with --overlap: revoke the old key as soon as the new one is used",
    },
    yes: YES_OPTION,
  },
  positionals: [1, 1, KEY_ARGUMENT],
  notes: [
    "",
    "The new key is printed once, on stdout; messages and the question go",
    "to stderr, so NEW=$(deno task -q keys rotate KEY) captures only the key.",
    "The old key stays valid until the new one is written: if stdout does not",
    "take it (the reader has exited), nothing changes and the command exits 1.",
    "With --overlap both keys work until the deadline (or, with",
    "--until-first-use, until the new key's first use), when the server",
    "revokes the old one; keys show and keys list show the pending retirement.",
    ...CONFIRM_NOTES.slice(1),
  ],
  async run(ctx) {
    const { store, positionals, json, out, actor, now } = ctx;
    const overlap = overlapOption(ctx.values, { now });
    const target = await resolve(store, positionals[0]);
    // A revoked key cannot be rotated, nor a key in an overlap: say so, with
    // a command that works instead, before anything is asked or written.
    if (target.status !== "valid") {
      const instead = await insteadOfRevoked(store, target, { verb: "rotate" });
      throw new ConsoleError(
        `Key ${
          named(target)
        } is revoked, and a revoked key cannot be rotated; ${instead}`,
        { code: "rotate_revoked" },
      );
    }
    if (target.replacedBy !== null) {
      throw await retiringRefusal(store, target);
    }
    // A line of rotated keys keeps at most two working: the key `target`
    // replaced, still in its overlap, goes now. Said before it is asked; a
    // script is never asked, and reads the retired key in the result.
    const asked = ctx.values.yes !== true && ctx.interactive;
    const overlapped = asked && target.rotatedFrom !== null
      ? overlappedPredecessor(target, await store.get(target.rotatedFrom))
      : null;
    await confirm({
      question: `Rotate key ${describe(target)}? ` +
        (overlap.overlapUntil
          ? `It keeps working until ${overlap.overlapUntil}${
            overlap.untilFirstUse ? " or the new key's first use" : ""
          }, then gets 401.`
          : "It is revoked at once: requests with it get 401 until the installation has the new key.") +
        (overlapped === null
          ? ""
          : ` Key ${overlapped.id}, which it replaced and which still works in its overlap, is revoked at once: a line of rotated keys keeps at most two working.`),
      declined: `Key ${named(target)} was not rotated; ` +
        "answer y to rotate it, or pass --yes",
    }, { yes: ctx.values.yes === true, interactive: ctx.interactive });
    refuseDiscardingStdout();
    const fresh = generateApiKey();
    if (await store.findByHash(fresh.hash) !== null) {
      throw new KeyCollisionError();
    }
    // The old key must work until the new one is out, and the store holds
    // one valid key per name: so the key is written first, and the value is
    // finished (the newline, the rest of the JSON) only once the store has
    // swapped the keys. A reader that waits for a whole line or a whole
    // JSON value never takes a key the store does not hold.
    try {
      out.deliver(json ? `{"key":${JSON.stringify(fresh.key)},` : fresh.key);
    } catch (error) {
      throw new ConsoleError(
        `Key ${
          named(target)
        } was not rotated: its replacement could not be written to stdout (${
          writeFailure(error)
        }); nothing changed and key ${target.id} is still valid; run the command again with stdout to a terminal, a file or a live pipe`,
        { code: "key_not_delivered" },
      );
    }
    const [rotated, interrupted] = await made(
      rotateAfterWrite(store, target, {
        fresh: { ...fresh, expiresAt: requestedExpiry({}, { now }) },
        rotation: { actor, ...overlap },
      }),
    );
    const { revoked, created, retired } = rotated;
    // The old key as the store holds it after the change, with the usage
    // that only get() fills in (a rotation returns the bare record).
    // The change is made either way: a store that cannot say gives the record.
    const replaced = json
      ? (await store.get(revoked.id).catch(() => null)) ?? revoked
      : revoked;
    try {
      out.deliver(
        json
          ? jsonText({
            ...publicRecord(created),
            replaces: publicRecord(replaced),
            retired: retired === null ? null : publicRecord(retired),
            ...storeField(ctx),
          }).slice(1) + "\n"
          : "\n",
      );
    } catch (error) {
      throw new ConsoleError(
        `Key ${target.id} was rotated into key ${
          named(created)
        }, but stdout closed before the new key was complete (${
          writeFailure(error)
        }); if whatever read stdout did not keep the new key, rotate key ${created.id} again`,
        { code: "key_not_delivered" },
      );
    }
    if (interrupted !== null) throw interrupted;
    report(
      `${
        revoked.status === "valid"
          ? `Key ${revoked.id} keeps working until ${revoked.expiresAt}${
            created.retires === null ? "" : ` or key ${created.id}'s first use`
          }; created`
          : `Revoked key ${revoked.id} and created`
      } key ${named(created)} for ${visible(created.email)} ${inStore(ctx)}.${
        retired === null
          ? ""
          : ` Revoked key ${retired.id}, which was still in its overlap.`
      }`,
    );
    await warnWithoutServer(ctx, NEW_KEY);
    report(STORE_WARNING);
  },
};

/**
 * The store's rotation, once the key is on stdout. On a store failure the key
 * is not stored unless the store says so, so the message reads back the store.
 */
async function rotateAfterWrite(
  store: KeyStore,
  target: KeyRecord,
  options: {
    fresh: { hash: string; hint: string; expiresAt: string | null };
    rotation: RotateOptions;
  },
): Promise<RotateResult> {
  try {
    return await store.rotate(target.id, options.fresh, options.rotation);
  } catch (error) {
    // Made: nothing to read back.
    if (error instanceof WaitInterruptedError) throw error;
    const cause = failure(error);
    // The store ended the transaction (committed or rolled back) before
    // it answered, unless it says it cannot tell: only then is a read-back
    // that finds no new key proof that none was stored.
    const ended = !(error instanceof StoreUnavailableError &&
      error.code === "change_unconfirmed");
    let state: string;
    try {
      // A commit whose answer was lost may still have happened.
      const created = await store.findByHash(options.fresh.hash);
      const old = await store.get(target.id);
      if (created !== null && old !== null) {
        const retired = old.rotatedFrom === null
          ? null
          : await store.get(old.rotatedFrom);
        return {
          revoked: old,
          created,
          retired: retired?.revokedReason === AUDIT_DETAIL.chainRotated(old.id)
            ? retired
            : null,
        };
      }
      state = old?.status === "valid"
        ? `key ${target.id} is unchanged and still valid`
        : `key ${target.id} is now ${
          old?.status ?? "gone"
        }, changed by someone else`;
    } catch {
      state =
        `the store cannot say whether key ${target.id} is still valid; run "keys show ${target.id}" once it answers`;
    }
    if (!ended) {
      throw new ConsoleError(
        `The key written to stdout may or may not be stored, as the store did not say whether the rotation ended (${cause}); keep it until "keys show ${target.id}" answers: if key ${target.id} was replaced, the key written is its replacement, otherwise discard it and run the command again`,
        { code: "change_uncertain" },
      );
    }
    throw new ConsoleError(
      `The key written to stdout was not stored and does not work (${cause}); discard it; ${state}; run the command again`,
    );
  }
}

/** `--overlap` and `--until-first-use`, checked before anything is asked or written. */
function overlapOption(
  values: Record<string, string | boolean | undefined>,
  options: { now: number },
): Pick<RotateOptions, "overlapUntil" | "untilFirstUse"> {
  const untilFirstUse = values["until-first-use"] === true;
  if (typeof values.overlap !== "string") {
    if (untilFirstUse) {
      throw new ConsoleError(
        "--until-first-use needs --overlap DURATION, the longest the old key may keep working",
        { code: "option_required" },
      );
    }
    return {};
  }
  return {
    overlapUntil: fromNow("--overlap", values.overlap, options),
    untilFirstUse,
  };
}

/**
 * Why an overlap key cannot be rotated again and what to run instead: rotate its
 * line's newest key while valid; else revoke the old one and create a new key.
 */
async function retiringRefusal(
  store: KeyStore,
  target: KeyRecord,
): Promise<ConsoleError> {
  const newest = await newestOfLine(store, target);
  const revokeNow = advice(["revoke", String(target.id)]);
  const message = newest.valid
    ? `Key ${
      named(target)
    } is already being replaced by key ${newest.record.id}; rotate key ${newest.record.id} instead with ${
      advice(["rotate", String(newest.record.id)])
    }, or stop key ${target.id} now with ${revokeNow}`
    : `Key ${
      named(target)
    } is in a rotation's overlap until ${target.expiresAt}, and its replacement, key ${target.replacedBy}, ${
      newest.record.id === target.id ? "is gone" : "is revoked"
    }, so neither can be rotated; stop key ${target.id} now with ${revokeNow}, then create the installation's next key with ${
      advice(["create", "--name", target.name, "--email", target.email])
    }`;
  return new ConsoleError(message, { code: "rotate_retiring" });
}
