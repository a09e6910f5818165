/**
 * The tests' fixtures for the real programs: the deno.json tasks as child
 * processes (from scripts/task_process.ts, which the benchmark shares), an
 * installation made with the console, TLS files made with openssl, and what
 * a run left on disk.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createKey, keys } from "../../scripts/task_process.ts";

export {
  createKey,
  keys,
  type RunResult,
  runTask,
  type ServerProcess,
  startServer,
  taskArgs,
  taskCommand,
  tempDir,
} from "../../scripts/task_process.ts";

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

/**
 * A throwaway CA (`ca.pem`) and a server certificate it signs for
 * localhost and 127.0.0.1 (`cert.pem`, `key.pem`) in `folder`, made with
 * openssl as an operator would have them.
 */
export async function makeTlsFiles(folder: string): Promise<void> {
  const tls = folder;
  await Deno.writeTextFile(
    `${tls}/leaf.ext`,
    "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
  );
  // A throwaway CA and a server certificate it signs, as an operator would have.
  for (
    const args of [
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test CA",
        "-keyout",
        `${tls}/ca.key`,
        "-out",
        `${tls}/ca.pem`,
      ],
      [
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        `${tls}/key.pem`,
        "-out",
        `${tls}/leaf.csr`,
      ],
      [
        "x509",
        "-req",
        "-in",
        `${tls}/leaf.csr`,
        "-CA",
        `${tls}/ca.pem`,
        "-CAkey",
        `${tls}/ca.key`,
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        `${tls}/leaf.ext`,
        "-out",
        `${tls}/cert.pem`,
      ],
    ]
  ) {
    const openssl = await new Deno.Command("openssl", {
      args,
      stdout: "null",
      stderr: "piped",
    }).output();
    assert.equal(openssl.code, 0, new TextDecoder().decode(openssl.stderr));
  }
}

/** A TCP port on 127.0.0.1 that was free a moment ago. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr;
  listener.close();
  return port;
}
