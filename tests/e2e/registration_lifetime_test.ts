/**
 * A server's registration lives no longer than the server, stopped as an
 * operator stops it: a second start on a port in use, and Ctrl-C (SIGINT)
 * or SIGTERM to the process group of `deno task start`, with an installed
 * `deno` and through npx. Each leaves nothing that changes a share or
 * delays a change: the server that kept running gives a key at 10/min
 * exactly 10 answers 200, and the console's change waits for nobody.
 */

import assert from "node:assert/strict";
import {
  keys,
  refusedStart,
  type ServerProcess,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { freshDatabase, NO_DATABASE, testStore } from "../support/postgres.ts";
import { GIVE_UP_MS, until } from "../support/wait.ts";
import { openStore } from "../../lib/store/open.ts";
import type { StoreLocation } from "../../lib/store/location.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const ROUTE = "/api/v1/integration/connection";
/** How many servers each signal stops at once. */
const STOPS = 10;

const npx = (await new Deno.Command("sh", {
  args: ["-c", "command -v npx"],
  stdout: "null",
}).output()).success;

/** A folder whose `deno` is this Deno, first on PATH. */
function denoOnPath(folder: string): string {
  Deno.mkdirSync(`${folder}/bin`);
  Deno.symlinkSync(Deno.execPath(), `${folder}/bin/deno`);
  return `${folder}/bin:${Deno.env.get("PATH")}`;
}

/**
 * `launcher task start` as the leader of its own process group, stopped
 * with `signal` to the whole group once it listens: its output, and its
 * leader's exit code, once every process of the group has let go of the
 * output (the server among them).
 */
async function startAndStop(
  launcher: string[],
  env: Record<string, string>,
  signal: "SIGINT" | "SIGTERM",
): Promise<{ code: number; output: string }> {
  const child = new Deno.Command("setsid", {
    args: [...launcher, "task", "start"],
    cwd: ROOT,
    env: { ...env, PORT: "0", HOST: "127.0.0.1", NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let output = "";
  const read = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      output += chunk;
    }
  };
  const ended = Promise.all([read(child.stdout), read(child.stderr)]);
  // Whatever happens, nothing of the group outlives the test.
  const kill = setTimeout(() => {
    try {
      Deno.kill(-child.pid, "SIGKILL");
    } catch {
      // gone already
    }
  }, 3 * GIVE_UP_MS);
  try {
    await until(
      () => output.includes('"msg":"listening"'),
      `a server to listen (output so far: ${output})`,
      { giveUpMs: 2 * GIVE_UP_MS },
    );
    Deno.kill(-child.pid, signal);
    const [{ code }] = await Promise.all([child.status, ended]);
    return { code, output };
  } finally {
    clearTimeout(kill);
  }
}

/** The store's registrations' ids, read as a change would read them. */
async function registrations(location: StoreLocation): Promise<string[]> {
  const store = await openStore(location);
  try {
    return (await store.instances()).map((instance) => instance.id).sort();
  } finally {
    await store.close();
  }
}

/** The number of servers in the last `peers` line `server` logged, if any. */
function lastPeers(server: ServerProcess): number | null {
  const all = [...server.output().matchAll(/"msg":"peers","servers":(\d+)}/g)];
  return all.length === 0 ? null : Number(all.at(-1)![1]);
}

/**
 * A key created at 10/min now, on a server that should count itself alone:
 * the change waits for no server, and the key gets exactly 10 × 200, then
 * 429, each answer stating the limit.
 */
async function limitGetsTen(
  survivor: ServerProcess,
  cwd: string,
  env: Record<string, string>,
): Promise<void> {
  const created = await keys(cwd, [
    "create",
    "--name",
    "limited",
    "--email",
    "ops@example.com",
    "--rate",
    "10/min",
    "--json",
  ], env);
  assert.equal(created.code, 0, created.stderr);
  assert.doesNotMatch(created.stderr, /Waiting|confirm/);
  const { key } = JSON.parse(created.stdout);
  const statuses: number[] = [];
  for (let i = 0; i < 11; i++) {
    const response = await fetch(survivor.url + ROUTE, {
      headers: { "X-API-Key": key },
    });
    await response.body?.cancel();
    statuses.push(response.status);
    assert.equal(
      response.headers.get("ratelimit-policy"),
      `"key";q=10;w=60`,
    );
  }
  assert.deepEqual(statuses, [...Array(10).fill(200), 429]);
}

async function survivesStops(options: {
  location: StoreLocation;
  env: Record<string, string>;
  launcher: string[];
  cwd: string;
}): Promise<void> {
  const { location, launcher, cwd } = options;
  const env = { ...options.env, PATH: denoOnPath(cwd) };
  const survivor = await startServer(cwd, env);
  try {
    const listed = await registrations(location);
    assert.equal(listed.length, 1);
    const [own] = listed;

    const second = await refusedStart(cwd, {
      ...env,
      PORT: `${survivor.port}`,
    });
    assert.equal(second.code, 1, second.output);
    assert.match(second.output, /address is already in use/);
    assert.deepEqual(
      await registrations(location),
      [own],
      "the failed start left its registration",
    );

    for (const signal of ["SIGINT", "SIGTERM"] as const) {
      const stops = await Promise.all(
        Array.from(
          { length: STOPS },
          () => startAndStop(launcher, env, signal),
        ),
      );
      // Each: the leader's exit code, its `stopping` lines, its `stopped` lines.
      const seen = stops.map(({ code, output }) =>
        [code, '"msg":"stopping"', '"msg":"stopped"'].map((line) =>
          typeof line === "number" ? line : output.split(line).length - 1
        ).join("/")
      );
      // npx answers a signal with its own code; deno task passes the server's on.
      const clean = launcher[0] === "npx" ? /^\d+\/1\/1$/ : /^0\/1\/1$/;
      assert.ok(
        seen.every((stop) => clean.test(stop)),
        `${signal}: exit code/stopping/stopped lines of each stop: ${seen}`,
      );
      assert.deepEqual(
        await registrations(location),
        [own],
        `${signal}: a stopped server left its registration`,
      );
    }
    // The survivor has listed the servers since they stopped.
    await until(
      () => [null, 1].includes(lastPeers(survivor)),
      "the surviving server to list itself alone",
    );

    await limitGetsTen(survivor, cwd, env);
  } finally {
    assert.equal(await survivor.stop(), 0, survivor.output());
  }
  assert.deepEqual(await registrations(location), []);
}

Deno.test({
  name:
    "Deno KV: a failed second start and 10 of 10 Ctrl-C and SIGTERM stops of deno task start's group leave no registration; the surviving server gives a 10/min key 10",
  async fn() {
    using dir = tempDir();
    const path = `${dir.path}/store/keys.db`;
    await survivesStops({
      location: { kind: "kv", path },
      env: { DENO_KV_PATH: path },
      launcher: ["deno"],
      cwd: dir.path,
    });
  },
});

Deno.test({
  name:
    "PostgreSQL: a failed second start and 10 of 10 Ctrl-C and SIGTERM stops of deno task start's group leave no registration; the surviving server gives a 10/min key 10",
  ignore: NO_DATABASE,
  async fn() {
    using dir = tempDir();
    await using database = await freshDatabase();
    await survivesStops({
      location: { kind: "postgres", url: database.url },
      env: { DATABASE_URL: database.url },
      launcher: ["deno"],
      cwd: dir.path,
    });
  },
});

Deno.test({
  name:
    "through npx, 10 of 10 Ctrl-C and SIGTERM stops of the group leave no registration; the surviving server gives a 10/min key 10",
  ignore: !npx && Deno.env.get("CI") !== "true",
  async fn() {
    using dir = tempDir();
    const path = `${dir.path}/store/keys.db`;
    await survivesStops({
      location: { kind: "kv", path },
      env: { DENO_KV_PATH: path },
      launcher: ["npx", "-y", "--", "deno@2.9.6"],
      cwd: dir.path,
    });
  },
});

for (const onPostgres of [false, true]) {
  Deno.test({
    name: `${
      onPostgres ? "PostgreSQL" : "Deno KV"
    }: a server killed outright stops counting, and is removed, once its lease has run out, with no change made meanwhile; the other server gives a 10/min key 10`,
    ignore: onPostgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using database = onPostgres ? await freshDatabase() : null;
      const path = `${dir.path}/store/keys.db`;
      const { env, location } = testStore(database, path);
      const survivor = await startServer(dir.path, env);
      try {
        const crashed = await startServer(dir.path, env);
        await survivor.waitForOutput(/"msg":"peers","servers":2}/);
        crashed.process.kill("SIGKILL");
        await crashed.process.status;
        await until(
          () => lastPeers(survivor) === 1,
          "the surviving server to stop counting the killed one",
        );
        await until(
          async () => (await registrations(location)).length === 1,
          "the killed server's registration to be removed",
        );
        await limitGetsTen(survivor, dir.path, env);
      } finally {
        assert.equal(await survivor.stop(), 0, survivor.output());
      }
    },
  });
}
