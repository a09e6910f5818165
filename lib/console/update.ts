/**
 * `keys update`: changes where a key may be used from, as an audited change
 * that holds for the next request on every server.
 *
 * @module
 */

import { InvalidFieldError } from "../store/errors.ts";
import { normalizeAllowFrom } from "../store/usage_lists.ts";
import { type Command, KEY_ARGUMENT, type OptionSpec } from "./command.ts";
import { CommandError, UsageError } from "./errors.ts";
import { report } from "./_output.ts";
import {
  advice,
  holderOfName,
  named,
  printRecord,
  resolve,
} from "./_records.ts";
import { describeStoreError } from "./store_errors.ts";

/** The word that lifts a restriction. */
const ANYWHERE = "any";

/** The option of `create` and `update`. */
export const ALLOW_FROM_OPTION: OptionSpec = {
  type: "string",
  help:
    'addresses or ranges the key works from, comma-separated (192.0.2.0/24,2001:db8::/48); "any" for anywhere',
};

/**
 * The value of `--allow-from`: canonical ranges, or null for "any". A
 * refusal is a usage error (exit 2) naming the option and the fix.
 */
export function allowFromOption(text: string): string[] | null {
  if (text.trim().toLowerCase() === ANYWHERE) return null;
  try {
    return normalizeAllowFrom(text.split(",").filter((r) => r.trim() !== ""));
  } catch (error) {
    if (error instanceof InvalidFieldError) {
      throw new UsageError(`--allow-from: ${describeStoreError(error)}`, {
        code: error.code,
      });
    }
    throw error;
  }
}

/** `keys update KEY --allow-from RANGES|any`. */
export const update: Command = {
  summary: "change where a key may be used from",
  usage: "update KEY --allow-from RANGES|any",
  options: { "allow-from": ALLOW_FROM_OPTION },
  positionals: [1, 1, KEY_ARGUMENT],
  notes: [
    "",
    "From any other address the key gets the 401 of an invalid key, from the",
    "next request on, on every server sharing the store.",
  ],
  async run(ctx) {
    const raw = ctx.values["allow-from"];
    if (typeof raw !== "string" || raw.trim() === "") {
      throw new UsageError(
        '--allow-from is required: ranges such as 192.0.2.0/24, or "any"',
        { code: "option_required" },
      );
    }
    const allowFrom = allowFromOption(raw);
    const target = await resolve(ctx.store, ctx.positionals[0]);
    if (target.status === "revoked") {
      // Not rotate: a revoked key cannot be rotated either.
      const holder = await holderOfName(ctx.store, target);
      const instead = holder === null
        ? `create the installation a new key with ${
          advice([
            "create",
            "--name",
            target.name,
            "--email",
            target.email,
            "--allow-from",
            raw,
          ])
        }`
        : `key ${holder.id} has its name now: update that one with ${
          advice(["update", String(holder.id), "--allow-from", raw])
        }`;
      throw new CommandError(
        `Key ${named(target)} is revoked and works from nowhere; ${instead}`,
        { code: "key_revoked" },
      );
    }
    const { record, changed } = await ctx.store.setAllowFrom(
      target.id,
      allowFrom,
      { actor: ctx.actor },
    );
    const where = allowFrom === null
      ? "anywhere"
      : `only ${allowFrom.join(", ")}`;
    report(
      changed
        ? `Key ${
          named(record)
        } now works from ${where}, from the next request on.`
        : `Key ${named(record)} already worked from ${where}; nothing changed.`,
    );
    // get() fills in the usage lists the change does not return.
    printRecord(ctx, (await ctx.store.get(record.id)) ?? record);
  },
};
