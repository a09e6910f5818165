/**
 * Revocation latency, as `deno task bench` reports it: how long a revoke
 * takes to return when it must wait for every running server to drop the
 * key (lib/store/acknowledged.ts), with all servers live and with one
 * frozen.
 *
 * Two servers from the `start` task share one store (a KV file, or a
 * PostgreSQL database), each under light load from clients with valid keys.
 * Keys are revoked one at a time:
 *
 * - with the console, `keys revoke ID --yes` through the keys task as an
 *   operator runs it, timed from issuing the command to its return: the
 *   task's launcher and the console each start a Deno process, so this
 *   includes two start-ups;
 * - in process, the store's `revoke` wrapped in `acknowledged()` here in
 *   the bench: the change and the wait, and the wait alone as its
 *   `onAcknowledged` report gives it.
 *
 * Then one server is frozen (SIGSTOP on the server process itself): the
 * first revoke after the freeze waits out the frozen server's lease and
 * removes its registration, so the later ones wait for the live server
 * alone. Frozen again after it has registered afresh, the same for the
 * in-process revoke.
 *
 * After every revoke returns, each live server is asked with the revoked
 * key and must answer 401: the point of the wait.
 *
 * @module
 */

import { generateApiKey } from "../lib/auth/api_key.ts";
import {
  acknowledged,
  type AcknowledgeReport,
  awaitAcknowledgement,
} from "../lib/store/acknowledged.ts";
import { openStore } from "../lib/store/open.ts";
import type { KeyService } from "../lib/store/keys.ts";
import type { KeyStore } from "../lib/store/types.ts";
import {
  type ServerProcess,
  startServer,
  taskCommand,
  tempDir,
} from "../scripts/task_process.ts";
import type { StoreKind } from "./stores.ts";

const ROUTE = "/api/v1/integration/connection";
/** Load clients per server, and their pause between requests: light load. */
const CLIENTS_PER_SERVER = 2;
const CLIENT_PAUSE_MS = 5;

/** Options of {@linkcode measureRevocation}. */
export interface RevocationOptions {
  /** Keys revoked each way with both servers live. */
  live: number;
  /** Keys revoked each way with one server frozen (the first, then the rest). */
  frozen: number;
}

/** Milliseconds of each revocation, in order. */
export interface RevocationResult {
  /** `keys revoke` wall time, both servers live. */
  consoleLive: number[];
  /** In-process revoke: change and acknowledgement, both servers live. */
  inProcessLive: number[];
  /** In-process: the acknowledgement wait alone, both servers live. */
  waitLive: number[];
  /** `keys revoke` wall time with one server frozen; the first is the first after the freeze. */
  consoleFrozen: number[];
  /** In-process with one server frozen; the first is the first after the freeze. */
  inProcessFrozen: number[];
  /** Revocations with one server frozen whose console said it waited for a server. */
  toldWaiting: number;
  /** …and said a server's lease ran out. */
  toldLapsed: number;
  /** In-process revocations with one server frozen whose report named a lapsed server. */
  inProcessLapsed: number;
  /** Requests with a just-revoked key to a live server, and how many got 401. */
  checks: number;
  refused: number;
  /** Load requests sent, and how many were not answered 200. */
  loadRequests: number;
  loadFailures: number;
}

/** Starts two servers on one new store of `kind` and measures revocations. */
export async function measureRevocation(
  kind: StoreKind,
  options: RevocationOptions,
): Promise<RevocationResult> {
  using dir = tempDir();
  // Declared before the servers, so that it is dropped after they stop.
  await using store = await kind.create(dir.path);
  const direct = await openStore(store.location);
  try {
    // Made before the servers start, so that no change waits for them yet.
    const needed = 2 * options.live + 2 * options.frozen;
    const keys: { id: number; key: string }[] = [];
    for (let i = 0; i < needed + CLIENTS_PER_SERVER * 2; i++) {
      const made = generateApiKey();
      const record = await direct.create({
        name: `revoke-${i}`,
        email: `revoke${i}@example.com`,
        hash: made.hash,
        hint: made.hint,
      }, { actor: "bench" });
      keys.push({ id: record.id, key: made.key });
    }
    const loadKeys = keys.splice(needed);
    // Lock-out out of reach: the 401 checks below all come from 127.0.0.1.
    const env = { ...store.env, LOCKOUT_MAX_FAILURES: "1000000000" };
    const servers: ServerProcess[] = [];
    try {
      for (let i = 0; i < 2; i++) {
        servers.push(
          await startServer(dir.path, env, "start", { keepOutput: false }),
        );
      }
      await registered(direct, servers.map((s) => s.process.pid));
      return await measure(direct, servers, {
        ...options,
        keys,
        loadKeys,
        cwd: dir.path,
        env: store.env,
      });
    } finally {
      for (const server of servers) {
        // A frozen server cannot stop.
        try {
          server.process.kill("SIGCONT");
        } catch {
          // already gone
        }
        await server.stop();
      }
    }
  } finally {
    await direct.close();
  }
}

async function measure(
  direct: KeyService,
  servers: ServerProcess[],
  options: RevocationOptions & {
    keys: { id: number; key: string }[];
    loadKeys: { id: number; key: string }[];
    cwd: string;
    env: Record<string, string>;
  },
): Promise<RevocationResult> {
  const result: RevocationResult = {
    consoleLive: [],
    inProcessLive: [],
    waitLive: [],
    consoleFrozen: [],
    inProcessFrozen: [],
    toldWaiting: 0,
    toldLapsed: 0,
    inProcessLapsed: 0,
    checks: 0,
    refused: 0,
    loadRequests: 0,
    loadFailures: 0,
  };
  const keys = [...options.keys];
  const reports: AcknowledgeReport[] = [];
  const store = acknowledged(direct, {
    onAcknowledged: (done) => reports.push(done),
  });
  const live = new Set(servers);
  const frozen = servers[1];

  // Light load: a few clients per server with valid keys that stay valid.
  let loading = true;
  const client = async (server: ServerProcess, key: string) => {
    while (loading) {
      try {
        const response = await fetch(server.url + ROUTE, {
          headers: { "X-API-Key": key },
        });
        await response.body?.cancel();
        if (response.status !== 200) result.loadFailures++;
      } catch {
        result.loadFailures++;
      }
      result.loadRequests++;
      await new Promise((r) => setTimeout(r, CLIENT_PAUSE_MS));
    }
  };
  const clients = servers.flatMap((server, s) =>
    Array.from(
      { length: CLIENTS_PER_SERVER },
      (_, c) =>
        client(server, options.loadKeys[s * CLIENTS_PER_SERVER + c].key),
    )
  );

  /** Each live server must refuse the key the revoke just returned for. */
  const check = async (key: string) => {
    for (const server of live) {
      const response = await fetch(server.url + ROUTE, {
        headers: { "X-API-Key": key },
      });
      await response.body?.cancel();
      result.checks++;
      if (response.status === 401) result.refused++;
    }
  };
  const viaConsole = async ({ id, key }: { id: number; key: string }) => {
    // Started before the task's command line is built: the task runner
    // too runs the `$(deno …)` in it for every command.
    const started = performance.now();
    const out = await taskCommand("keys", {
      cwd: options.cwd,
      args: ["revoke", String(id), "--yes"],
      env: options.env,
      stdout: "null",
      stderr: "piped",
    }).output();
    const ms = performance.now() - started;
    const stderr = new TextDecoder().decode(out.stderr);
    if (out.code !== 0) throw new Error(`keys revoke failed: ${stderr}`);
    await check(key);
    return { ms, stderr };
  };
  const inProcess = async ({ id, key }: { id: number; key: string }) => {
    const before = reports.length;
    const started = performance.now();
    await store.revoke(id, { actor: "bench", reason: "benchmark" });
    const ms = performance.now() - started;
    await check(key);
    const done = reports.length > before ? reports.at(-1) : undefined;
    return {
      ms,
      waited: done?.waitedMs ?? NaN,
      lapsed: done?.lapsed.length ?? 0,
    };
  };
  const freeze = async () => {
    // The server process itself: startServer runs Deno directly, and
    // registered() checked that these pids are the registered ones.
    frozen.process.kill("SIGSTOP");
    live.delete(frozen);
    // Let an acknowledgement the server was writing land or not, as it will.
    await new Promise((r) => setTimeout(r, 50));
  };
  const thaw = async () => {
    frozen.process.kill("SIGCONT");
    live.add(frozen);
    // It finds its registration removed and registers afresh.
    await registered(direct, servers.map((s) => s.process.pid));
  };

  try {
    for (let i = 0; i < options.live; i++) {
      result.consoleLive.push((await viaConsole(keys.shift()!)).ms);
    }
    for (let i = 0; i < options.live; i++) {
      const { ms, waited } = await inProcess(keys.shift()!);
      result.inProcessLive.push(ms);
      result.waitLive.push(waited);
    }
    if (options.frozen > 0) {
      await freeze();
      for (let i = 0; i < options.frozen; i++) {
        const { ms, stderr } = await viaConsole(keys.shift()!);
        result.consoleFrozen.push(ms);
        if (stderr.includes("Waiting up to")) result.toldWaiting++;
        if (/did not confirm|before confirming/.test(stderr)) {
          result.toldLapsed++;
        }
      }
      await thaw();
      await freeze();
      for (let i = 0; i < options.frozen; i++) {
        const { ms, lapsed } = await inProcess(keys.shift()!);
        result.inProcessFrozen.push(ms);
        if (lapsed > 0) result.inProcessLapsed++;
      }
      await thaw();
    }
  } finally {
    loading = false;
    if (!live.has(frozen)) frozen.process.kill("SIGCONT");
    await Promise.all(clients);
  }
  return result;
}

/**
 * Waits until a registration stands for each of `pids` and all have
 * acknowledged the store's revision: the servers hold leases.
 */
async function registered(store: KeyStore, pids: number[]): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const instances = await store.instances();
    const have = new Set(instances.map((i) => i.pid));
    if (pids.every((pid) => have.has(pid))) break;
    if (Date.now() > deadline) {
      throw new Error(
        `servers ${pids.join(", ")} did not register; registered: ${
          [...have].join(", ") || "none"
        }`,
      );
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  const { lapsed } = await awaitAcknowledgement(store);
  if (lapsed.length > 0) {
    throw new Error("a server did not acknowledge while all were live");
  }
}

/** The nearest-rank percentile `p` (0–1) of `values`. */
function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)];
}

/** The section of the results file. */
export function revocationLines(result: RevocationResult): string[] {
  const ms = (n: number) => Number.isFinite(n) ? n.toFixed(0) : "–";
  const row = (servers: string, measured: string, values: number[]) =>
    `| ${servers} | ${measured} | ${values.length} | ${
      ms(percentile(values, 0.5))
    } | ${ms(percentile(values, 0.99))} | ${ms(Math.max(...values))} |`;
  const frozen = "one frozen (SIGSTOP)";
  const out = [
    "## Revocation latency",
    "",
    `Two servers from the start task on one store, each under light load (${CLIENTS_PER_SERVER} clients per server with valid keys, ${CLIENT_PAUSE_MS} ms between a client's requests); keys revoked one at a time. Console: \`keys revoke ID --yes\` through the keys task, from issuing the command to its return (two Deno start-ups included: the task's launcher and the console). In process: the store's revoke wrapped in \`acknowledged()\` in the bench process, the change and the wait for every server's acknowledgement; the wait alone is its \`onAcknowledged\` report. Percentiles are nearest-rank: with few revocations p99 is the maximum.`,
    "",
    "| servers | measured | revocations | p50 ms | p99 ms | max ms |",
    "| --- | --- | ---: | ---: | ---: | ---: |",
    row("both live", "console: command issued → returned", result.consoleLive),
    row(
      "both live",
      "in process: change + acknowledgement",
      result.inProcessLive,
    ),
    row("both live", "in process: acknowledgement wait alone", result.waitLive),
  ];
  if (result.consoleFrozen.length > 0) {
    out.push(
      row(frozen, "console: first after the freeze", [
        result.consoleFrozen[0],
      ]),
      row(frozen, "console: later", result.consoleFrozen.slice(1)),
      row(frozen, "in process: first after the freeze", [
        result.inProcessFrozen[0],
      ]),
      row(frozen, "in process: later", result.inProcessFrozen.slice(1)),
    );
  }
  out.push(
    "",
    `After each revoke returned, every live server was asked with the revoked key: ${result.refused} of ${result.checks} answers were 401.` +
      (result.consoleFrozen.length > 0
        ? ` With one server frozen, the console said it was waiting for a server in ${result.toldWaiting} of ${result.consoleFrozen.length} revocations, and that a server's lease ran out in ${result.toldLapsed}; in process, a server's lease ran out in ${result.inProcessLapsed} of ${result.inProcessFrozen.length}. Expected: in the first only, which waits out the frozen server's lease and removes its registration, so that the later ones wait for the live server alone; a lease that ran out in a later one means that registration was left in place.`
        : "") +
      ` Load: ${result.loadRequests} requests, ${result.loadFailures} not answered 200 (requests to the frozen server are answered once it is thawed).`,
    "",
  );
  return out;
}
