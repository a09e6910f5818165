/**
 * `keys update`: changes where a key may be used from and its rate limit,
 * each as an audited change that holds for the next request on every server.
 *
 * @module
 */

import { formatRate, parseRate } from "../auth/rate_limit.ts";
import type { KeyRecord, RateLimit } from "../store/types.ts";
import { normalizeAllowFrom } from "../store/usage_lists.ts";
import {
  type Command,
  CONFIRM_NOTES,
  KEY_ARGUMENT,
  type OptionSpec,
  YES_OPTION,
} from "./command.ts";
import { ConsoleError } from "./errors.ts";
import { checked, RATE_OPTION } from "./_input.ts";
import { report } from "./_output.ts";
import { confirm } from "./_prompt.ts";
import { overlapPartner, partnerId } from "../store/records.ts";
import {
  describe,
  insteadOfRevoked,
  named,
  printRecord,
  resolve,
} from "./_records.ts";
import {
  inStore,
  OTHER_CHANGE,
  storeField,
  warnWithoutServer,
} from "./_store.ts";

export const ALLOW_FROM_OPTION: OptionSpec = {
  type: "string",
  help:
    'addresses or ranges the key works from, comma-separated (192.0.2.0/24,2001:db8::/48); "any" for anywhere',
};

/** The value of `--allow-from`: canonical ranges, or null for "any". */
export function allowFromOption(text: string): string[] | null {
  if (text.trim().toLowerCase() === "any") return null;
  return checked(
    (ranges) =>
      normalizeAllowFrom(ranges.split(",").filter((r) => r.trim() !== "")),
    text,
  );
}

export const update: Command = {
  summary: "change where a key may be used from, or its rate limit",
  usage: "update KEY (--allow-from RANGES|any | --rate RATE|none)... [--yes]",
  options: {
    "allow-from": ALLOW_FROM_OPTION,
    rate: RATE_OPTION,
    yes: YES_OPTION,
  },
  positionals: [1, 1, KEY_ARGUMENT],
  notes: [
    "",
    "From any other address the key gets the 401 of an invalid key, from the",
    "next request on, on every server sharing the store.",
    "Past its rate the key gets 429 with Retry-After, from the next request",
    "on; the servers share the limit, so the installation keeps it as a whole.",
    "A rotation line has one limit: --rate on a key whose rotation's other",
    "key still works in its overlap sets both, says so, and asks first only",
    "then; with --json, rateLimitChanged lists the ids whose limit changed.",
    ...CONFIRM_NOTES.slice(1),
  ],
  async run(ctx) {
    const raw = ctx.values["allow-from"];
    const rateText = ctx.values.rate;
    // An empty value is refused as the value it is, not taken for the
    // option left out: the other option would be applied without it.
    const hasAllow = typeof raw === "string";
    const hasRate = typeof rateText === "string";
    if (!hasAllow && !hasRate) {
      throw new ConsoleError(
        '--allow-from or --rate is required: ranges such as 192.0.2.0/24 or "any"; a rate such as 600/min or "none"',
        { code: "option_required" },
      );
    }
    const allowFrom = hasAllow ? allowFromOption(raw) : undefined;
    const rateLimit = hasRate ? checked(parseRate, rateText) : undefined;
    const target = await resolve(ctx.store, ctx.positionals[0]);
    if (target.status === "revoked") {
      const instead = await insteadOfRevoked(ctx.store, target, {
        verb: "update",
        also: [
          ...(hasAllow ? ["--allow-from", raw] : []),
          ...(hasRate ? ["--rate", rateText] : []),
        ],
      });
      throw new ConsoleError(
        `Key ${named(target)} is revoked and works from nowhere; ${instead}`,
        { code: "key_revoked" },
      );
    }
    // A line has one limit: its other key still in its overlap is set too.
    // Said before it is asked; a script is never asked, and reads the keys
    // changed in the result.
    const other = rateLimit === undefined ? null : partnerId(target);
    const partner = other === null
      ? null
      : overlapPartner(target, await ctx.store.get(other), ctx.now);
    if (
      partner !== null &&
      JSON.stringify(partner.rateLimit) !== JSON.stringify(rateLimit)
    ) {
      await confirm({
        question: `Give key ${describe(target)} ${rateWords(rateLimit!)}? Key ${
          named(partner)
        }, ${
          partner.id === target.rotatedFrom
            ? "which it replaced"
            : "its replacement"
        }, still works in their overlap and gets it too: a line of rotated keys has one limit.`,
        declined: `Key ${named(target)}'s rate limit was not changed; ` +
          "answer y to change it and key " + partner.id + "'s, or pass --yes",
      }, { yes: ctx.values.yes === true, interactive: ctx.interactive });
    }
    let record = target;
    let rateLimitChanged: number[] | undefined;
    const said = (
      set: { changed: boolean; record: KeyRecord },
      now: string,
      already: string,
    ) =>
      report(
        `Key ${named(set.record)} ${
          set.changed
            ? `${now} ${inStore(ctx)}, from the next request on.`
            : `${already} ${inStore(ctx)}; nothing changed.`
        }`,
      );
    if (allowFrom !== undefined) {
      const set = await ctx.store.setAllowFrom(target.id, allowFrom, {
        actor: ctx.actor,
      });
      record = set.record;
      const where = allowFrom === null
        ? "anywhere"
        : `only ${allowFrom.join(", ")}`;
      said(set, `now works from ${where}`, `already worked from ${where}`);
    }
    if (rateLimit !== undefined) {
      const set = await ctx.store.setRateLimit(target.id, rateLimit, {
        actor: ctx.actor,
      });
      record = set.record;
      const rate = rateWords(rateLimit);
      // Both limits in their stored shape.
      const own = JSON.stringify(target.rateLimit) !==
        JSON.stringify(set.record.rateLimit);
      rateLimitChanged = [
        ...(own ? [target.id] : []),
        ...(set.partner === null ? [] : [set.partner.id]),
      ];
      said(
        set,
        `now has ${rate}${
          set.partner === null
            ? ""
            : `, and so has key ${set.partner.id}, the other key of its rotation still in its overlap (a line has one limit)`
        }`,
        `already had ${rate}`,
      );
    }
    await warnWithoutServer(ctx, OTHER_CHANGE);
    // get() fills in the usage lists the change does not return.
    printRecord(
      ctx,
      (await ctx.store.get(record.id)) ?? record,
      {
        ...(rateLimitChanged === undefined ? {} : { rateLimitChanged }),
        ...storeField(ctx),
      },
    );
  },
};

function rateWords(limit: RateLimit | null): string {
  return limit === null
    ? "no rate limit"
    : `a rate limit of ${formatRate(limit)}`;
}
