/**
 * `keys show`: one key, every field.
 *
 * @module
 */

import { type Command, KEY_ARGUMENT } from "./command.ts";
import { printRecord, resolve } from "./_records.ts";

/** `keys show KEY`. */
export const show: Command = {
  summary: "show one key",
  usage: "show KEY",
  options: {},
  positionals: [1, 1, KEY_ARGUMENT],
  notes: ["", "Times are shown exactly (ISO 8601) and relative to now."],
  async run(ctx) {
    printRecord(ctx, await resolve(ctx.store, ctx.positionals[0]));
  },
};
