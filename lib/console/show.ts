/**
 * `keys show`: one key, every field.
 *
 * @module
 */

import { type Command, KEY_ARGUMENT } from "./command.ts";
import { pendingRetirement, printRecord, resolve } from "./_records.ts";
import { visible } from "./_output.ts";

export const show: Command = {
  summary: "show one key",
  usage: "show KEY",
  options: {},
  positionals: [1, 1, KEY_ARGUMENT],
  notes: ["", "Times are shown exactly (ISO 8601) and relative to now."],
  async run(ctx) {
    const record = await resolve(ctx.store, ctx.positionals[0]);
    printRecord(ctx, record);
    const pending = await pendingRetirement(ctx.store, record);
    // Outside the JSON value, which holds the same facts in its fields.
    if (pending !== null && !ctx.json) {
      ctx.out.line(`${"retirement".padEnd(14)}${visible(pending)}`);
    }
  },
};
