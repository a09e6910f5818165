/**
 * `keys status`: the store in use, every server registered on it (live or
 * lapsed, as lib/console/_server_watch.ts tells them) and the figures the live
 * ones published with their last renewal, summed. Reads only: it removes no
 * registration and retires no key. Exits 3 when no server is live.
 *
 * @module
 */

import { storeName } from "../store/location.ts";
import type { ServerFigures, TrafficFigures } from "../store/types.ts";
import type { Command, Context } from "./command.ts";
import { paint } from "./_format.ts";
import { jsonText, report } from "./_output.ts";
import {
  type ServerState,
  type WatchedServer,
  watchServers,
} from "./_server_watch.ts";
import { type Column, fitColumns, headingLine, rowLine } from "./_table.ts";

/** The exit code when no server is live: the table's 3, for a cron job to alert on. */
const NO_LIVE_SERVER_EXIT = 3;

/** Figures of every live server that published some, added up. */
interface InstallationFigures {
  /** Live servers whose figures these are. */
  servers: number;
  lastMinute: TrafficFigures;
  sinceStart: TrafficFigures;
  lockedAddresses: number;
}

/** One server as `--json` gives it. */
interface ServerLine {
  id: string;
  host: string;
  pid: number;
  release: string | null;
  startedAt: string;
  leaseMs: number;
  leaseAgeMs: number;
  state: ServerState;
  removed: boolean;
  /** The last revision it confirmed; null when unreadable. */
  confirmed: number | null;
  figures: ServerFigures | null;
}

export const status: Command = {
  summary: "show the store, its servers (live or lapsed) and their figures",
  usage: "status",
  options: {},
  positionals: [0, 0],
  notes: [
    "",
    "Watches the servers' registrations for up to a lease (3 s): a server that",
    "renews meanwhile is live; one unchanged for a whole lease, or removed, is",
    "lapsed and not counted. Figures are summed over live servers, as each",
    "published them with its last renewal. Exits 3 when no server is live,",
    "--json included, so a cron job can alert on it.",
  ],
  async run(ctx) {
    const { servers } = await watchServers(ctx.store);
    const revision = Number(await ctx.store.revision());
    const lines = servers.map(serverLine);
    const live = lines.filter((line) => line.state === "live");
    const document = {
      store: ctx.where,
      revision,
      live: live.length,
      servers: lines,
      figures: installationFigures(live),
    };
    if (ctx.json) ctx.out.line(jsonText(document));
    else printStatus(ctx, document);
    if (live.length > 0) return 0;
    report(
      `No server is live on this store (${
        storeName(ctx.where)
      }); start one, or give the servers' DENO_KV_PATH or DATABASE_URL to the console`,
    );
    return NO_LIVE_SERVER_EXIT;
  },
};

function serverLine(server: WatchedServer): ServerLine {
  const { record } = server;
  return {
    id: record.id,
    host: record.host,
    pid: record.pid,
    release: record.release ?? null,
    startedAt: record.startedAt,
    leaseMs: record.leaseMs,
    leaseAgeMs: Math.round(server.leaseAgeMs),
    state: server.state,
    removed: server.removed,
    confirmed: record.broken ? null : Number(record.acked),
    figures: record.figures ?? null,
  };
}

const TRAFFIC: Record<keyof TrafficFigures, string> = {
  requests: "requests",
  ok: "200",
  unauthorized: "401",
  lockedOut: "429 lock-out",
  rateLimited: "429 rate limit",
  rateLimitedKeys: "keys that hit their limit",
};

/** The figures of `live` servers summed; each counts only its own clients and keys. */
function installationFigures(
  live: Pick<ServerLine, "figures">[],
): InstallationFigures {
  const zero = () =>
    Object.fromEntries(
      Object.keys(TRAFFIC).map((name) => [name, 0]),
    ) as unknown as TrafficFigures;
  const sum: InstallationFigures = {
    servers: 0,
    lastMinute: zero(),
    sinceStart: zero(),
    lockedAddresses: 0,
  };
  for (const { figures } of live) {
    if (figures === null) continue;
    sum.servers++;
    sum.lockedAddresses += figures.lockedAddresses;
    for (const name of Object.keys(TRAFFIC) as (keyof TrafficFigures)[]) {
      sum.lastMinute[name] += figures.lastMinute[name];
      sum.sinceStart[name] += figures.sinceStart[name];
    }
  }
  return sum;
}

type Status = {
  revision: number;
  live: number;
  servers: ServerLine[];
  figures: InstallationFigures;
};

function printStatus(ctx: Context, status: Status): void {
  const bold = (text: string) => ctx.colour ? paint(text, "bold") : text;
  const { out } = ctx;
  out.line(`Store: ${storeName(ctx.where)}, at revision ${status.revision}`);
  out.line("");
  let columns = serverColumns(status.revision);
  if (ctx.columns !== undefined) {
    ({ columns } = fitColumns(columns, ctx.columns));
  }
  out.line(headingLine(columns, { paint: bold }));
  for (const server of status.servers) {
    out.line(rowLine(columns, server, {
      paint: ctx.colour
        ? (text, column) =>
          column.heading === "STATE" && server.state !== "live"
            ? paint(text, "yellow")
            : text
        : undefined,
    }));
  }
  out.line("");
  out.line(
    `${status.live} of ${status.servers.length} registered ${
      status.servers.length === 1 ? "server" : "servers"
    } live`,
  );
  const { figures } = status;
  if (status.live === 0) return;
  out.line("");
  out.line(
    `Figures of ${figures.servers} of ${status.live} live ${
      status.live === 1 ? "server" : "servers"
    }, as of each one's last renewal:`,
  );
  out.line(headingLine(FIGURE_COLUMNS, { paint: bold }));
  for (const name of Object.keys(TRAFFIC) as (keyof TrafficFigures)[]) {
    out.line(rowLine(FIGURE_COLUMNS, {
      label: TRAFFIC[name],
      lastMinute: String(figures.lastMinute[name]),
      sinceStart: String(figures.sinceStart[name]),
    }));
  }
  out.line(rowLine(FIGURE_COLUMNS, {
    label: "addresses locked now",
    lastMinute: String(figures.lockedAddresses),
    sinceStart: "",
  }));
}

function serverColumns(revision: number): Column<ServerLine>[] {
  return [
    {
      heading: "HOST",
      width: 20,
      min: 8,
      cell: (s) =>
        s.confirmed === null
          ? `unreadable ${s.id}`
          : s.host === ""
          ? "-"
          : s.host,
    },
    {
      heading: "PID",
      width: 8,
      cell: (s) => s.confirmed === null ? "" : `${s.pid}`,
    },
    {
      heading: "RELEASE",
      width: 10,
      dropRank: 2,
      cell: (s) => s.release ?? "-",
    },
    {
      heading: "STARTED",
      width: 20,
      dropRank: 1,
      cell: (s) =>
        s.startedAt === ""
          ? ""
          : s.startedAt.slice(0, 19).replace("T", " ") + "Z",
    },
    {
      heading: "LEASE AGE",
      width: 9,
      // Live: written at most this long ago; otherwise at least.
      cell: (s) => `${s.state === "live" ? "≤" : "≥"} ${seconds(s.leaseAgeMs)}`,
    },
    {
      heading: "STATE",
      width: 15,
      cell: (s) => s.removed ? "lapsed, removed" : s.state,
    },
    {
      heading: "CONFIRMED",
      width: 16,
      min: 9,
      cell: (s) =>
        s.confirmed === null
          ? ""
          : s.confirmed < 0
          ? "none"
          : s.confirmed < revision
          ? `${s.confirmed} (behind)`
          : `${s.confirmed}`,
    },
  ];
}

const FIGURE_COLUMNS: Column<
  { label: string; lastMinute: string; sinceStart: string }
>[] = [
  { heading: "", width: 26, cell: (row) => row.label },
  { heading: "LAST MINUTE", width: 12, cell: (row) => row.lastMinute },
  { heading: "SINCE START", width: 12, cell: (row) => row.sinceStart },
];

/** `0.4 s`, `12.0 s`. */
function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}
