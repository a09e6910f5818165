/**
 * `keys audit`: the audit log, oldest first, of every key or one.
 *
 * @module
 */

import type { AuditEntry } from "../store/types.ts";
import { type Command, KEY_ARGUMENT } from "./command.ts";
import { jsonText } from "./_output.ts";
import { resolve } from "./_records.ts";
import { type Column, headingLine, rowLine } from "./_table.ts";

/** `keys audit [KEY]`. */
export const audit: Command = {
  summary: "show the audit log, oldest first",
  usage: "audit [KEY]",
  options: {},
  positionals: [0, 1, KEY_ARGUMENT],
  async run({ store, positionals, json, out }) {
    const keyId = positionals[0] === undefined
      ? undefined
      : (await resolve(store, positionals[0])).id;
    const entries = store.audit({ keyId });
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

const AUDIT_COLUMNS: Column<AuditEntry>[] = [
  { heading: "AT", width: 20, cell: (e) => shortTime(e.at) },
  { heading: "ACTION", width: 8, cell: (e) => e.action },
  { heading: "KEY", width: 6, cell: (e) => String(e.keyId) },
  { heading: "BY", width: 28, cell: (e) => e.actor },
  { heading: "DETAIL", width: 40, cell: (e) => e.detail ?? "" },
];

/** An ISO time to the second, as a column 20 wide shows it. */
function shortTime(iso: string | null): string {
  return iso === null ? "" : iso.slice(0, 19).replace("T", " ") + "Z";
}
