/**
 * `keys list`: valid or all keys, as a table streamed from the store or one JSON array.
 *
 * @module
 */

import { formatRate, RATE_MAX_COUNT } from "../auth/rate_limit.ts";
import { recordAt } from "../store/expiry.ts";
import { RATE_MAX_WINDOW_SECONDS } from "../store/rate_limits.ts";
import { publicRecord } from "../store/records.ts";
import type { KeyRecord } from "../store/types.ts";
import type { Command } from "./command.ts";
import { paint, RELATIVE_TIME_WIDTH, relativeTime } from "./_format.ts";
import { jsonText, report } from "./_output.ts";
import { recordTone, tinted } from "./_records.ts";
import { type Column, fitColumns, headingLine, rowLine } from "./_table.ts";

export const list: Command = {
  summary: "list valid keys, or with --all revoked ones too",
  usage: "list [--all]",
  options: {
    all: { type: "boolean", help: "include revoked keys, with when and why" },
  },
  positionals: [0, 0],
  notes: [
    "",
    "Times are shown relative to now; --json gives them exactly (ISO 8601).",
    "At a terminal the table is fitted to its width and coloured (revoked",
    "keys dim, exposed keys yellow); NO_COLOR turns colour off.",
  ],
  async run(ctx) {
    const { store, values, json, out } = ctx;
    const all = values.all === true;
    const records = asOf(store.list({ includeRevoked: all }), {
      now: ctx.now,
      all,
    });
    if (json) {
      out.write("[");
      let first = true;
      for await (const record of records) {
        out.write((first ? "" : ",") + jsonText(publicRecord(record)));
        first = false;
        if (out.closed) return;
      }
      out.line("]");
      return;
    }
    let columns = listColumns(ctx.now, all);
    let dropped: string[] = [];
    if (ctx.columns !== undefined) {
      ({ columns, dropped } = fitColumns(columns, ctx.columns));
    }
    out.line(headingLine(columns, {
      paint: ctx.colour ? (text) => paint(text, "bold") : undefined,
    }));
    let count = 0;
    const exposed: number[] = [];
    const exposedRetiring: number[] = [];
    const soon: number[] = [];
    for await (const record of records) {
      out.line(rowLine(columns, record, {
        paint: ctx.colour
          ? (text, column) => tinted(text, recordTone(record, column.heading))
          : undefined,
      }));
      count++;
      // The heading and the first row go out at once: whoever waits for
      // the listing sees it start, whatever the store's size, rather than
      // after the 64 KiB the buffer otherwise gathers.
      if (count === 1) out.flush();
      if (out.closed) break;
      if (record.exposedAt !== null && record.status === "valid") {
        // One in a rotation's overlap cannot be rotated again: only revoked.
        (record.replacedBy === null ? exposed : exposedRetiring).push(
          record.id,
        );
      }
      if (expiringSoon(record, ctx.now) && record.replacedBy === null) {
        soon.push(record.id);
      }
    }
    out.flush();
    report(`${count} ${all ? "" : "valid "}key${count === 1 ? "" : "s"}`);
    const notes: [shown: unknown[], what: string, fix: string][] = [
      [
        exposed,
        "Exposed: sent in a URL, where proxies and logs may keep them, or reported as leaked",
        'rotate each with "keys rotate KEY"',
      ],
      [
        exposedRetiring,
        "Exposed and in a rotation's overlap",
        'revoke each now with "keys revoke KEY"',
      ],
      [
        soon,
        `Expiring within ${EXPIRING_SOON_DAYS} days`,
        'rotate each with "keys rotate KEY --overlap 7d" and hand over the new key',
      ],
      [
        dropped,
        "Left out to fit the terminal",
        'widen it, or use "keys show KEY" or --json',
      ],
    ];
    for (const [shown, what, fix] of notes) {
      if (shown.length > 0) report(`${what}: ${shown.join(", ")}; ${fix}`);
    }
  },
};

/** Keys expiring within this many days are pointed out. */
const EXPIRING_SOON_DAYS = 7;

/** Whether a valid key stops working within {@linkcode EXPIRING_SOON_DAYS}. */
function expiringSoon(record: KeyRecord, now: number): boolean {
  return record.status === "valid" && record.expiresAt !== null &&
    Date.parse(record.expiresAt) - now < EXPIRING_SOON_DAYS * 86_400_000;
}

/** The most an expiry's mark adds: " (retiring)", " (soon)". */
const EXPIRY_MARKS = " (retiring)".length;

/** The longest rate formatRate writes: "1000000000/86399s". */
const RATE_WIDTH = formatRate({
  count: RATE_MAX_COUNT,
  windowSeconds: RATE_MAX_WINDOW_SECONDS - 1,
}).length;

/** The listing's columns, narrowest first to go when a terminal is narrow. */
function listColumns(now: number, all: boolean): Column<KeyRecord>[] {
  const ago = (iso: string | null, none = "") =>
    iso === null ? none : relativeTime(iso, { now });
  const columns: Column<KeyRecord>[] = [
    { heading: "ID", width: 6, cell: (r) => String(r.id) },
    { heading: "NAME", width: 24, min: 10, cell: (r) => r.name },
    {
      heading: "EMAIL",
      width: 28,
      min: 12,
      dropRank: 3,
      cell: (r) => r.email,
    },
    { heading: "STATUS", width: 7, cell: (r) => r.status },
    {
      heading: "CREATED",
      width: RELATIVE_TIME_WIDTH,
      cell: (r) => ago(r.createdAt),
    },
    {
      heading: "LAST USED",
      width: RELATIVE_TIME_WIDTH,
      dropRank: 5,
      cell: (r) => ago(r.lastUsedAt, "never"),
    },
    { heading: "HINT", width: 10, dropRank: 2, cell: (r) => r.hint },
    {
      heading: "EXPIRES",
      // Piped, the longest value whole: "in 59 minutes (retiring)".
      width: RELATIVE_TIME_WIDTH + EXPIRY_MARKS,
      min: 10,
      dropRank: 6,
      cell: (r) =>
        r.status !== "valid" || r.expiresAt === null
          ? ""
          : `${ago(r.expiresAt)}${
            r.replacedBy !== null
              ? " (retiring)"
              : expiringSoon(r, now)
              ? " (soon)"
              : ""
          }`,
    },
    {
      heading: "RATE",
      width: RATE_WIDTH,
      dropRank: 7,
      cell: (r) => r.rateLimit === null ? "" : formatRate(r.rateLimit),
    },
    // Which keys were exposed is repeated on stderr, so this column goes first.
    {
      heading: "EXPOSED",
      width: 34,
      min: 16,
      dropRank: 1,
      cell: (r) =>
        r.exposedAt === null
          ? ""
          : `${ago(r.exposedAt)} from ${r.exposedFrom ?? "an unknown address"}`,
    },
  ];
  if (!all) return columns;
  return [
    ...columns,
    {
      heading: "REVOKED",
      width: RELATIVE_TIME_WIDTH,
      cell: (r) => ago(r.revokedAt),
    },
    {
      heading: "REASON",
      width: 32,
      min: 12,
      dropRank: 4,
      cell: (r) => r.revokedReason ?? "",
    },
  ];
}

/** As the server sees them: keys past their deadline are revoked, listed only with revoked ones. */
async function* asOf(
  records: AsyncIterable<KeyRecord>,
  options: { now: number; all: boolean },
): AsyncIterable<KeyRecord> {
  for await (const record of records) {
    const current = recordAt(record, options.now);
    if (options.all || current.status === "valid") yield current;
  }
}
