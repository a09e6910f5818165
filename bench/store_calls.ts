/**
 * What the traffic of one store block cost the store, as `deno task bench`
 * reports it: the server's store calls by method, from the last line it
 * logs on SIGTERM (main.ts), per 1 000 requests it served in the block.
 *
 * With leases (lib/auth/lease.ts) a request for a known key reads nothing: the
 * request path's read (`findByHashAt`) should stay near zero, and the
 * lease's and key index's own reads (polls, changes, revision, the index's
 * key list) follow time and changes, not traffic, so they too fall per
 * 1 000 requests as the traffic grows.
 *
 * @module
 */

/** The request path's read: a record fetched for one request. */
const REQUEST_READS = ["findByHashAt"];
/** The reads the lease and the key index make in the background. */
const BACKGROUND_READS = [
  "pollInstance",
  "changesSince",
  "revision",
  "importRevision",
  "keyHashes",
];

/** One block's traffic and what it cost. */
export interface StoreCallBlock {
  /** Keys in the store. */
  keys: number;
  /** Every request wrk reported against the server in the block, warm-ups included. */
  requests: number;
  /** Calls by method, from the server's last log line; null if it had none. */
  calls: Record<string, number> | null;
  /** PostgreSQL transactions committed in the block's database meanwhile. */
  commits?: number;
}

/**
 * The `storeCalls` of the server's `{"msg":"stopped",…}` line in `output`,
 * or null when the server did not write one (it did not stop cleanly).
 */
export function storeCallsOf(output: string): Record<string, number> | null {
  // The last such line: output interleaves stdout and stderr, line by line.
  const lines = output.split("\n").filter((line) =>
    line.includes('"msg":"stopped"')
  );
  const last = lines.at(-1);
  if (last === undefined) return null;
  try {
    const parsed = JSON.parse(last) as { storeCalls?: Record<string, number> };
    return parsed.storeCalls ?? null;
  } catch {
    return null;
  }
}

/** The section's table: per 1 000 requests, with the counts themselves. */
export function storeCallLines(blocks: StoreCallBlock[]): string[] {
  if (blocks.length === 0) return [];
  const postgres = blocks.some((b) => b.commits !== undefined);
  const per = (count: number, requests: number) =>
    requests > 0
      ? `${(count / requests * 1000).toFixed(3)} (${count})`
      : `– (${count})`;
  const sum = (calls: Record<string, number>, names: string[]) =>
    names.reduce((total, name) => total + (calls[name] ?? 0), 0);
  const out = [
    "## Store calls per 1 000 requests",
    "",
    "Counted by the server (its last log line on SIGTERM) over each whole store block: start-up, every row above (warm-ups included), the flood and the console rows; per 1 000 of the requests wrk reported in the block, with the counts in brackets. Background reads are the lease's and the key index's: " +
    BACKGROUND_READS.map((m) => `\`${m}\``).join(", ") +
    ". Other calls are writes (registration, acknowledgements, last use, usage).",
    "",
    `| keys in store | requests served | request path (\`findByHashAt\`) | ${
      BACKGROUND_READS.map((m) => `\`${m}\``).join(" | ")
    } | all reads | other calls |${postgres ? " PostgreSQL commits |" : ""}`,
    `| ---: | ---: | ---: | ${
      BACKGROUND_READS.map(() => "---:").join(" | ")
    } | ---: | ---: |${postgres ? " ---: |" : ""}`,
  ];
  for (const block of blocks) {
    const calls = block.calls;
    if (calls === null) {
      out.push(
        `| ${block.keys} | ${block.requests} | the server wrote no counts (it did not stop cleanly) |`,
      );
      continue;
    }
    const reads = sum(calls, [...REQUEST_READS, ...BACKGROUND_READS]);
    const all = Object.values(calls).reduce((a, b) => a + b, 0);
    const cells = [
      block.keys,
      block.requests,
      per(sum(calls, REQUEST_READS), block.requests),
      ...BACKGROUND_READS.map((m) => per(calls[m] ?? 0, block.requests)),
      per(reads, block.requests),
      per(all - reads, block.requests),
    ];
    if (postgres) {
      cells.push(
        block.commits === undefined || !Number.isFinite(block.commits)
          ? "–"
          : per(block.commits, block.requests),
      );
    }
    out.push(`| ${cells.join(" | ")} |`);
  }
  const others = new Set<string>();
  for (const block of blocks) {
    for (const name of Object.keys(block.calls ?? {})) {
      if (![...REQUEST_READS, ...BACKGROUND_READS].includes(name)) {
        others.add(name);
      }
    }
  }
  out.push("");
  if (others.size > 0) {
    out.push(
      `Other calls: ${
        blocks.filter((b) => b.calls !== null).map((b) =>
          `${b.keys} keys: ${
            [...others].filter((m) => b.calls![m]).map((m) =>
              `\`${m}\` ${b.calls![m]}`
            ).join(", ")
          }`
        ).join("; ")
      }.`,
      "",
    );
  }
  if (postgres) {
    out.push(
      "PostgreSQL commits: the change in `pg_stat_database.xact_commit` of the block's database from after it was filled to after the server stopped (every transaction in it, the console rows' included).",
      "",
    );
  }
  return out;
}
