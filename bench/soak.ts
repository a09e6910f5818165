/**
 * A bounded soak test: `deno task soak`.
 *
 * 64 connections on loopback for 30 s against a real server process: honest
 * clients with valid keys (one key with a rate limit of 100/min, one used
 * from ever new networks, so that the limiter's counts and the notes of
 * new networks are part of what must not leak) beside attackers: invalid and revoked keys and
 * checksum-valid invented keys from ever new addresses, one client in a
 * guessing loop, bursts of invented keys from one address at once, idle
 * connections that send nothing and slow heads that dribble a byte a
 * second. The server trusts 127.0.0.1 as a proxy (TRUSTED_PROXIES) so that
 * each virtual client has its own address in X-Forwarded-For.
 *
 * Fails when an honest client is refused, on any wrong answer (a revoked
 * key accepted, a burst getting more 401s than the threshold, any 5xx), or
 * on a live heap (what survives a full collection) that grows.
 *
 * Environment: SOAK_SECONDS (30), SOAK_CONNECTIONS (64), SOAK_IDLE (200
 * idle connections), SOAK_SLOW (50 slow heads).
 *
 * @module
 */

import { generateApiKey } from "../lib/auth/api_key.ts";
import { connectHeapProbe, freePort } from "./_heap.ts";
import {
  createKey,
  keys,
  startServer,
  tempDir,
} from "../scripts/task_process.ts";

const SECONDS = Number(Deno.env.get("SOAK_SECONDS") ?? 30);
const CONNECTIONS = Number(Deno.env.get("SOAK_CONNECTIONS") ?? 64);
const IDLE = Number(Deno.env.get("SOAK_IDLE") ?? 200);
const SLOW = Number(Deno.env.get("SOAK_SLOW") ?? 50);
const ROUTE = "/api/v1/integration/connection";
/**
 * How far the live heap may grow over the run before it counts as a leak
 * (or half the warm heap, if more): caches fill to their bounds early, and
 * a leak of tens of bytes a request passes it in a run.
 */
const LEAK_SLACK = 4 * 1024 * 1024;
/** How long one request may take before the soak counts it as failed. */
const REQUEST_TIMEOUT_MS = 30_000;
/** The server's default LOCKOUT_MAX_FAILURES. */
const THRESHOLD = 10;

type Kind =
  | "valid"
  | "limited"
  | "roaming"
  | "invalid"
  | "revoked"
  | "invented"
  | "guesser";

/** Which statuses are right for each kind of client. */
const ALLOWED: Record<Kind, Set<number>> = {
  // Valid-key clients never fail, so they are never locked.
  valid: new Set([200]),
  // A key with a rate limit: 200 within it, 429 rate_limited past it.
  limited: new Set([200, 429]),
  // A valid key from ever new networks: each a first use to note and audit,
  // which the server bounds per key and per flush. Each request is a
  // stranger's, so while the floods fill the lock-out's hashed tables some
  // get a false 429 (the documented cost of tables that never forget).
  roaming: new Set([200, 429]),
  // Invalid, revoked and invented keys come from ever new addresses: 401,
  // or 429 once their network's or the global failure budget is spent.
  invalid: new Set([401, 429]),
  revoked: new Set([401, 429]),
  invented: new Set([401, 429]),
  // The guesser keeps one address: 401 until locked, then 429.
  guesser: new Set([401, 429]),
};

/** Resident memory of a process, from ps: reading /proc needs --allow-all in Deno. */
export async function rssBytes(pid: number): Promise<number> {
  const out = await new Deno.Command("ps", {
    args: ["-o", "rss=", "-p", String(pid)],
    stdout: "piped",
    stderr: "null",
  }).output();
  return Number(new TextDecoder().decode(out.stdout).trim() || 0) * 1024;
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

async function main(): Promise<number> {
  using dir = tempDir();
  console.error(`Preparing keys in ${dir.path} …`);
  const valid = await Promise.all(
    Array.from({ length: 8 }, (_, i) => createKey(dir.path, `valid-${i}`)),
  );
  const revoked = await Promise.all(
    Array.from({ length: 4 }, (_, i) => createKey(dir.path, `revoked-${i}`)),
  );
  const limited = await createKey(dir.path, "limited");
  const rated = await keys(dir.path, [
    "update",
    String(limited.id),
    "--rate",
    "100/min",
  ]);
  if (rated.code !== 0) throw new Error(rated.stderr);
  const roaming = await createKey(dir.path, "roaming");
  for (const { id } of revoked) {
    const result = await keys(dir.path, ["revoke", String(id)]);
    if (result.code !== 0) throw new Error(result.stderr);
  }
  const inspectorPort = freePort();
  await using server = await startServer(
    dir.path,
    {
      TRUSTED_PROXIES: "127.0.0.1",
    },
    "start",
    { runtimeFlags: [`--inspect=127.0.0.1:${inspectorPort}`] },
  );
  // Closed before the server is stopped: a server with an inspector
  // session attached does not exit on SIGTERM (Deno 2.9).
  const heap = await connectHeapProbe(inspectorPort);
  const pid = server.process.pid;
  // A soak stopped from outside (a cancelled CI job, `timeout`) takes its
  // server, whose inspector any local process could use, and its store
  // with it, rather than leaving them behind.
  const abandon = (signal: "SIGINT" | "SIGTERM") => () => {
    heap[Symbol.dispose]();
    server.process.kill("SIGKILL");
    Deno.removeSync(dir.path, { recursive: true });
    console.error(`Soak stopped by ${signal}; its server was killed`);
    Deno.exit(signal === "SIGINT" ? 130 : 143);
  };
  const onInt = abandon("SIGINT");
  const onTerm = abandon("SIGTERM");
  Deno.addSignalListener("SIGINT", onInt);
  Deno.addSignalListener("SIGTERM", onTerm);
  let exited = false;
  server.process.status.then(() => exited = true);
  // However the soak ends, a throw included: the probe closed and a server
  // still running killed, since with an inspector session attached it
  // would ignore the SIGTERM of `await using` and hang the soak.
  using _cleanup = {
    [Symbol.dispose]() {
      heap[Symbol.dispose]();
      Deno.removeSignalListener("SIGINT", onInt);
      Deno.removeSignalListener("SIGTERM", onTerm);
      if (exited) return;
      try {
        server.process.kill("SIGKILL");
      } catch {
        // gone meanwhile
      }
    },
  };

  const kinds: Kind[] = Array.from(
    { length: CONNECTIONS },
    (_, i) =>
      i === 0
        ? "guesser"
        : i % 8 === 1
        ? "invalid"
        : i % 8 === 2
        ? "revoked"
        : i % 8 === 3
        ? "invented"
        : i % 8 === 4
        ? "limited"
        : i % 8 === 5
        ? "roaming"
        : "valid",
  );
  const counts = new Map<string, number>();
  const wrong: string[] = [];
  let fresh = 0;
  const deadline = Date.now() + SECONDS * 1000;

  async function worker(kind: Kind, n: number): Promise<void> {
    while (Date.now() < deadline) {
      let key: string;
      let address: string;
      if (kind === "valid") {
        key = valid[n % valid.length].key;
        address = `10.0.${n >> 8}.${n & 255}`;
      } else if (kind === "limited") {
        key = limited.key;
        address = `10.0.${n >> 8}.${n & 255}`;
      } else if (kind === "roaming") {
        key = roaming.key;
        const r = ++fresh;
        address = `10.${4 + ((r >> 8) & 63)}.${r & 255}.1`;
      } else if (kind === "revoked") {
        key = revoked[n % revoked.length].key;
        address = `10.1.${(++fresh >> 8) & 255}.${fresh & 255}`;
      } else if (kind === "invalid") {
        // Malformed and well-formed-but-unknown keys, alternately.
        key = fresh % 2 ? "not-a-key" : `isk_${"x".repeat(36)}`;
        address = `10.2.${(++fresh >> 8) & 255}.${fresh & 255}`;
      } else if (kind === "invented") {
        key = generateApiKey().key;
        address = `10.3.${(++fresh >> 8) & 255}.${fresh & 255}`;
      } else {
        key = `isk_guess${fresh++}`;
        address = "10.9.9.9";
      }
      let status: number;
      try {
        const response = await fetch(`${server.url}${ROUTE}`, {
          headers: { "X-API-Key": key, "X-Forwarded-For": address },
          // A server that stops answering fails the soak, never hangs it.
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        await response.body?.cancel();
        status = response.status;
      } catch {
        status = 0;
      }
      const label = `${kind} ${status}`;
      counts.set(label, (counts.get(label) ?? 0) + 1);
      if (!ALLOWED[kind].has(status) && wrong.length < 20) {
        wrong.push(`${kind} client got ${status}`);
      }
    }
  }

  console.error(`Running ${CONNECTIONS} connections for ${SECONDS} s …`);
  const samples: number[] = [];
  const startRss = await rssBytes(pid);
  const started = Date.now();
  const sampler = setInterval(
    () => rssBytes(pid).then((bytes) => samples.push(bytes), () => {}),
    1000,
  );
  const live: number[] = [];
  const probeErrors: string[] = [];
  const sampleLive = () =>
    heap.liveBytes().then(
      (bytes) => void live.push(bytes),
      (error) => void probeErrors.push(String(error?.message ?? error)),
    );
  // The first sample once warm, however short the run, then every 5 s.
  let liveSampler: ReturnType<typeof setInterval> | undefined;
  const firstLive = setTimeout(() => {
    sampleLive();
    liveSampler = setInterval(sampleLive, 5000);
  }, Math.min(5000, (SECONDS * 1000) / 3));
  const attacks = [
    holdIdle(server.port, IDLE, deadline),
    slowHeads(server.port, SLOW, deadline),
    bursts(server.url, deadline, wrong),
  ];
  await Promise.all(kinds.map((kind, i) => worker(kind, i)));
  const attacked = await Promise.all(attacks);
  const elapsed = (Date.now() - started) / 1000;
  clearInterval(sampler);
  clearTimeout(firstLive);
  clearInterval(liveSampler);
  const endRss = await rssBytes(pid);
  await sampleLive();
  const exitedEarly = exited;
  heap[Symbol.dispose]();
  await server.stop();

  console.log(
    `Attackers: ${attacked[0]} idle connections opened, ${
      attacked[1]
    } slow heads opened, ${attacked[2]} bursts of 40 sent`,
  );
  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  console.log("| client | status | count |\n| --- | --- | --- |");
  for (const [label, count] of [...counts].sort()) {
    const [kind, status] = label.split(" ");
    console.log(`| ${kind} | ${status} | ${count} |`);
  }
  // A leak is what survives a full collection: the live heap at the end
  // against the smallest seen after warm-up. Resident memory alone climbs
  // until V8's next major collection, however long that waits (84 to 110
  // MB over 30 s on a quiet machine with no leak), so it is judged only
  // with a wide margin.
  const warmLive = Math.min(...live);
  const endLive = live.at(-1) ?? 0;
  // Judged only with a sample after warm-up and one at the end.
  const leaked = live.length >= 2 &&
    endLive - warmLive > Math.max(LEAK_SLACK, warmLive / 2);
  const warm = samples[Math.min(4, samples.length - 1)] ?? startRss;
  // With the heap collected every 5 s, resident memory that still climbs
  // by half is held outside JavaScript (sockets, the runtime's buffers).
  const swelled = endRss > warm * 1.5;
  console.log(
    `\n${total} requests (${Math.round(total / elapsed)}/s); server RSS ${
      mb(startRss)
    } at start, ${mb(warm)} after warm-up, ${
      mb(endRss)
    } at the end; live heap after a full collection ${
      mb(warmLive)
    } at its lowest, ${mb(endLive)} at the end`,
  );

  const guesserLocked = (counts.get("guesser 429") ?? 0) > 0;
  const limitHeld = (counts.get("limited 429") ?? 0) > 0 &&
    (counts.get("limited 200") ?? 0) > 0;
  const roamed = counts.get("roaming 200") ?? 0;
  // How many strangers a saturated table refuses grows with the flood,
  // which grows with the machine's speed: only "served at all" is judged.
  const roamingServed = roamed > 0;
  // Default LOCKOUT_MAX_FAILURES: ten guesses, then locked for the whole run,
  // however many fresh addresses the other clients flood the tracker with.
  const guesses = counts.get("guesser 401") ?? 0;
  const problems = [
    ...wrong,
    ...(guesserLocked ? [] : ["the guessing client was never locked out"]),
    ...(limitHeld
      ? []
      : ["the rate-limited key was not both served and refused"]),
    ...(roamingServed ? [] : [
      "the key used from new networks was never served",
    ]),
    ...(guesses > 10
      ? [`the guessing client got ${guesses} tries, not 10`]
      : []),
    ...(leaked
      ? [`the server's live heap grew: ${live.map(mb).join(", ")}`]
      : []),
    ...(swelled
      ? [`the server's resident memory grew: ${samples.map(mb).join(", ")}`]
      : []),
    ...(total === 0 ? ["no request was answered"] : []),
    ...(exitedEarly ? ["the server exited during the run"] : []),
    ...(live.length < 2
      ? [`the server's heap was not measured: ${probeErrors.join("; ")}`]
      : []),
  ];
  if (problems.length > 0) {
    console.error(`Soak failed:\n- ${problems.join("\n- ")}`);
    return 1;
  }
  console.log("Soak passed: every answer was right and memory levelled off");
  return 0;
}

/**
 * Keeps `count` connections open that never send a byte, reopening any the
 * server closes; returns how many were opened in all.
 */
async function holdIdle(
  port: number,
  count: number,
  deadline: number,
): Promise<number> {
  let opened = 0;
  const one = async () => {
    while (Date.now() < deadline) {
      try {
        const conn = await Deno.connect({ hostname: "127.0.0.1", port });
        opened++;
        // Returns when the server closes it, or at the deadline.
        await Promise.race([
          conn.read(new Uint8Array(1)).catch(() => null),
          new Promise((r) => setTimeout(r, deadline - Date.now())),
        ]);
        conn.close();
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  };
  await Promise.all(Array.from({ length: count }, one));
  return opened;
}

/** Connections that send a request head one byte a second, forever. */
async function slowHeads(
  port: number,
  count: number,
  deadline: number,
): Promise<number> {
  let opened = 0;
  const head = new TextEncoder().encode(
    `GET ${ROUTE} HTTP/1.1\r\nHost: x\r\nX-Padding: ${"a".repeat(4000)}`,
  );
  const one = async () => {
    while (Date.now() < deadline) {
      let conn: Deno.TcpConn | undefined;
      try {
        conn = await Deno.connect({ hostname: "127.0.0.1", port });
        opened++;
        for (let i = 0; i < head.length && Date.now() < deadline; i++) {
          await conn.write(head.subarray(i, i + 1));
          await new Promise((r) => setTimeout(r, 1000));
        }
      } catch {
        // Closed by the server: start another.
      } finally {
        try {
          conn?.close();
        } catch {
          // already closed
        }
      }
    }
  };
  await Promise.all(Array.from({ length: count }, one));
  return opened;
}

/**
 * Every second, 40 invented keys at once from one fresh address: each burst
 * must get no more 401s than the lock-out threshold.
 */
async function bursts(
  url: string,
  deadline: number,
  wrong: string[],
): Promise<number> {
  let sent = 0;
  while (Date.now() < deadline - 1000) {
    const address = `10.7.${(sent >> 8) & 255}.${sent & 255}`;
    sent++;
    const statuses = await Promise.all(
      Array.from({ length: 40 }, async () => {
        try {
          const response = await fetch(`${url}${ROUTE}`, {
            headers: {
              "X-API-Key": generateApiKey().key,
              "X-Forwarded-For": address,
            },
            signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
          });
          await response.body?.cancel();
          return response.status;
        } catch {
          return 0;
        }
      }),
    );
    const unauthorized = statuses.filter((s) => s === 401).length;
    const other = statuses.filter((s) => s !== 401 && s !== 429);
    if ((unauthorized > THRESHOLD || other.length > 0) && wrong.length < 20) {
      wrong.push(
        `a burst from ${address} got ${unauthorized} 401s and ${
          other.join(",") || "no"
        } other statuses`,
      );
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  return sent;
}

if (import.meta.main) Deno.exit(await main());
