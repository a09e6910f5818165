/**
 * A bounded soak test: `deno task soak`.
 *
 * 64 connections on loopback for 30 s against a real server process: clients
 * with valid keys, with invalid keys, with revoked keys, and one client in a
 * guessing loop. The server runs with TRUST_PROXY_HOPS=1 so that each
 * virtual client has its own address in X-Forwarded-For, as behind a proxy.
 *
 * Fails on any wrong answer (a revoked key accepted, a valid key refused
 * outside lock-out, any 5xx) or on server memory that keeps growing.
 *
 * Environment: SOAK_SECONDS (30), SOAK_CONNECTIONS (64).
 *
 * @module
 */

import { createKey, keys, startServer, tempDir } from "../tests/_helpers.ts";

const SECONDS = Number(Deno.env.get("SOAK_SECONDS") ?? 30);
const CONNECTIONS = Number(Deno.env.get("SOAK_CONNECTIONS") ?? 64);
const ROUTE = "/api/v1/integration/connection";

type Kind = "valid" | "invalid" | "revoked" | "guesser";

/** Which statuses are right for each kind of client. */
const ALLOWED: Record<Kind, Set<number>> = {
  // Valid-key clients never fail, so they are never locked.
  valid: new Set([200]),
  // Invalid and revoked keys come from ever new addresses: 401, never locked.
  invalid: new Set([401]),
  revoked: new Set([401]),
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
  for (const { id } of revoked) {
    const result = await keys(dir.path, ["revoke", String(id)]);
    if (result.code !== 0) throw new Error(result.stderr);
  }
  await using server = await startServer(dir.path, { TRUST_PROXY_HOPS: "1" });
  const pid = server.process.pid;

  const kinds: Kind[] = Array.from(
    { length: CONNECTIONS },
    (_, i) =>
      i === 0
        ? "guesser"
        : i % 8 === 1
        ? "invalid"
        : i % 8 === 2
        ? "revoked"
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
      } else if (kind === "revoked") {
        key = revoked[n % revoked.length].key;
        address = `10.1.${(++fresh >> 8) & 255}.${fresh & 255}`;
      } else if (kind === "invalid") {
        // Malformed and well-formed-but-unknown keys, alternately.
        key = fresh % 2 ? "not-a-key" : `isk_${"x".repeat(36)}`;
        address = `10.2.${(++fresh >> 8) & 255}.${fresh & 255}`;
      } else {
        key = `isk_guess${fresh++}`;
        address = "10.9.9.9";
      }
      let status: number;
      try {
        const response = await fetch(`${server.url}${ROUTE}`, {
          headers: { "X-API-Key": key, "X-Forwarded-For": address },
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
  const sampler = setInterval(
    async () => samples.push(await rssBytes(pid)),
    1000,
  );
  await Promise.all(kinds.map((kind, i) => worker(kind, i)));
  clearInterval(sampler);
  const endRss = await rssBytes(pid);
  await server.stop();

  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  console.log("| client | status | count |\n| --- | --- | --- |");
  for (const [label, count] of [...counts].sort()) {
    const [kind, status] = label.split(" ");
    console.log(`| ${kind} | ${status} | ${count} |`);
  }
  // Memory after warm-up against the end: a bounded server levels off.
  const warm = samples[Math.min(4, samples.length - 1)] ?? startRss;
  const lastThird = samples.slice(Math.floor((samples.length * 2) / 3));
  const growing = lastThird.length > 2 &&
    lastThird.every((v, i) => i === 0 || v > lastThird[i - 1]) &&
    endRss > warm * 1.25;
  console.log(
    `\n${total} requests (${Math.round(total / SECONDS)}/s); server RSS ${
      mb(startRss)
    } at start, ${mb(warm)} after warm-up, ${mb(endRss)} at the end`,
  );

  const guesserLocked = (counts.get("guesser 429") ?? 0) > 0;
  // Default LOCKOUT_MAX_FAILURES: ten guesses, then locked for the whole run,
  // however many fresh addresses the other clients flood the tracker with.
  const guesses = counts.get("guesser 401") ?? 0;
  const problems = [
    ...wrong,
    ...(guesserLocked ? [] : ["the guessing client was never locked out"]),
    ...(guesses > 10
      ? [`the guessing client got ${guesses} tries, not 10`]
      : []),
    ...(growing
      ? [`server memory kept growing: ${samples.map(mb).join(", ")}`]
      : []),
    ...(total === 0 ? ["no request was answered"] : []),
  ];
  if (problems.length > 0) {
    console.error(`Soak failed:\n- ${problems.join("\n- ")}`);
    return 1;
  }
  console.log("Soak passed: every answer was right and memory levelled off");
  return 0;
}

if (import.meta.main) Deno.exit(await main());
