/**
 * The tests' fixtures for the real programs: the deno.json tasks as child
 * processes (from scripts/task_process.ts, which the benchmark shares), an
 * installation made with the console, TLS files made with openssl, and what
 * a run left on disk.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  createKey,
  keys,
  type ServerProcess,
  ServerStartError,
  startServer,
} from "../../scripts/task_process.ts";

export {
  createKey,
  keys,
  type RunResult,
  runTask,
  type ServerProcess,
  ServerStartError,
  startServer,
  taskArgs,
  taskCommand,
  tempDir,
} from "../../scripts/task_process.ts";
export { makeTlsFiles } from "../../scripts/tls_files.ts";

/** The keys of {@linkcode sampleInstallation}, by what became of them. */
export interface SampleInstallation {
  valid: string;
  revoked: string;
  rotatedOld: string;
  rotatedNew: string;
}

/**
 * An installation made with the console as an admin would: ids 1-3 created,
 * 2 revoked, 3 rotated into 4. Keys: berlin-erp (ops@), hamburg-erp (it@),
 * munich-erp (edv@example.com).
 */
export async function sampleInstallation(
  cwd: string,
  env: Record<string, string> = {},
): Promise<SampleInstallation> {
  const valid = await createKey(cwd, "berlin-erp", "ops@example.com", env);
  const revoked = await createKey(cwd, "hamburg-erp", "it@example.com", env);
  const rotated = await createKey(cwd, "munich-erp", "edv@example.com", env);
  const revoke = await keys(
    cwd,
    ["revoke", "hamburg-erp", "--reason", "machine decommissioned"],
    env,
  );
  assert.equal(revoke.code, 0, revoke.stderr);
  const rotate = await keys(cwd, ["rotate", "munich-erp", "--json"], env);
  assert.equal(rotate.code, 0, rotate.stderr);
  return {
    valid: valid.key,
    revoked: revoked.key,
    rotatedOld: rotated.key,
    rotatedNew: JSON.parse(rotate.stdout).key,
  };
}

/** Every file below a folder, read as bytes decoded as latin1 (nothing is lost). */
export async function readTree(path: string): Promise<string> {
  let all = "";
  for await (const entry of Deno.readDir(path)) {
    const full = `${path}/${entry.name}`;
    if (entry.isDirectory) all += await readTree(full);
    else if (entry.isFile) {
      all += new TextDecoder("latin1").decode(await Deno.readFile(full));
    }
  }
  return all;
}

/** What `keys rotate --json` prints: the new key, and the old one as it now is. */
export interface Rotated {
  id: number;
  key: string;
  /** With --until-first-use, the id of the key the first use retires. */
  retires?: number;
  /** The old key, whose overlap ends at `expiresAt`. */
  replaces: { id: number; expiresAt: string };
}

/**
 * `keys rotate NAME --overlap OVERLAP [--until-first-use] --yes --json`,
 * which must succeed.
 */
export async function rotateWithOverlap(
  cwd: string,
  name: string,
  overlap: string,
  options: { untilFirstUse?: boolean; env?: Record<string, string> } = {},
): Promise<Rotated> {
  const rotate = await keys(cwd, [
    "rotate",
    name,
    "--overlap",
    overlap,
    ...(options.untilFirstUse ? ["--until-first-use"] : []),
    "--yes",
    "--json",
  ], options.env);
  assert.equal(rotate.code, 0, rotate.stderr);
  return JSON.parse(rotate.stdout);
}

/** An hour's overlap that the new key's first use ends. */
export function rotateUntilFirstUse(
  cwd: string,
  name: string,
  env: Record<string, string> = {},
): Promise<Rotated> {
  return rotateWithOverlap(cwd, name, "1h", { untilFirstUse: true, env });
}

/**
 * A start the server must refuse: its exit code (null if it hung) and what
 * it printed, for the operator to read. Fails if it starts after all.
 */
export async function refusedStart(
  cwd: string,
  env: Record<string, string>,
): Promise<{ code: number | null; output: string }> {
  const error = await startServer(cwd, env).then(
    async (server) => {
      await server.stop();
      return new Error(`the server started, on ${server.url}`);
    },
    (error: unknown) => error,
  );
  assert.ok(error instanceof ServerStartError, String(error));
  return { code: error.exitCode, output: error.output };
}

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr;
  listener.close();
  return port;
}

/**
 * Starts `count` servers on one store (lock-out off, so that a test's own
 * refusals never lock it) and waits until each counts them all.
 */
export async function startPeers(
  cwd: string,
  env: Record<string, string>,
  count: number,
): Promise<ServerProcess[]> {
  const started = await Promise.all(
    Array.from({ length: count }, () =>
      startServer(cwd, {
        HOST: "127.0.0.1",
        LOCKOUT_MAX_FAILURES: "1000000000",
        ...env,
      })),
  );
  await Promise.all(
    started.map((server) =>
      server.waitForOutput(new RegExp(`"msg":"peers","servers":${count}}`))
    ),
  );
  return started;
}
