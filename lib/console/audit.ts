/**
 * `keys audit`: the audit log, oldest first, of every key or one installation's
 * key line (the key, those it replaced and those that replaced it).
 *
 * @module
 */

import { keyLineAudit } from "../store/key_line.ts";
import { AUDIT_ACTIONS } from "../store/records.ts";
import type { AuditEntry } from "../store/types.ts";
import { type Command, KEY_ARGUMENT } from "./command.ts";
import { jsonText, report } from "./_output.ts";
import { named, resolve } from "./_records.ts";
import { type Column, headingLine, rowLine } from "./_table.ts";

export const audit: Command = {
  summary: "show the audit log, oldest first",
  usage: "audit [KEY]",
  options: {},
  positionals: [0, 1, KEY_ARGUMENT],
  notes: [
    "",
    "With KEY, the history of that installation's key across rotations:",
    "the keys it replaced and those that replaced it, any one of whose ids",
    "(or the name of the valid one) gives the same history, and the imports",
    "that brought them in. An import concerns no one key: its KEY is empty",
    "(keyId 0 in --json).",
  ],
  async run({ store, positionals, json, out }) {
    let entries: AsyncIterable<AuditEntry>;
    if (positionals[0] === undefined) entries = store.audit();
    else {
      const target = await resolve(store, positionals[0]);
      entries = keyLineAudit(store, target.id, {
        onLine: (ids) => {
          if (ids.length < 2) return;
          report(
            `Key ${named(target)} is one installation's key with ${
              listed(ids.filter((id) => id !== target.id))
            }, each rotated into the next: their history follows`,
          );
        },
      });
    }
    if (json) {
      const all: AuditEntry[] = [];
      for await (const entry of entries) all.push(entry);
      out.line(jsonText(all));
      return;
    }
    out.line(headingLine(AUDIT_COLUMNS));
    for await (const entry of entries) {
      out.line(rowLine(AUDIT_COLUMNS, entry));
    }
  },
};

/** "key 2", "keys 2 and 3", "keys 2, 3 and 5". */
function listed(ids: number[]): string {
  if (ids.length === 1) return `key ${ids[0]}`;
  return `keys ${ids.slice(0, -1).join(", ")} and ${ids[ids.length - 1]}`;
}

const AUDIT_COLUMNS: Column<AuditEntry>[] = [
  { heading: "AT", width: 20, cell: (e) => shortTime(e.at) },
  {
    heading: "ACTION",
    // Every action whole, the longest included.
    width: Math.max(...AUDIT_ACTIONS.map((action) => action.length)),
    cell: (e) => e.action,
  },
  // An import brings in every key of its file: no one key to name.
  {
    heading: "KEY",
    width: 6,
    cell: (e) => e.action === "import" ? "" : String(e.keyId),
  },
  { heading: "BY", width: 28, cell: (e) => e.actor },
  { heading: "DETAIL", width: 40, cell: (e) => e.detail ?? "" },
];

/** An ISO time to the second, as a column 20 wide shows it. */
function shortTime(iso: string | null): string {
  return iso === null ? "" : iso.slice(0, 19).replace("T", " ") + "Z";
}
