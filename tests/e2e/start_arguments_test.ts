/**
 * The start task's command line: the server is configured by environment
 * variables alone, so an argument is refused rather than silently ignored,
 * and `--help` lists the variables.
 */

import assert from "node:assert/strict";
import { SERVER_VARIABLES } from "../../lib/server/permissions.ts";
import {
  type RunResult,
  startServer,
  taskCommand,
  tempDir,
} from "../support/processes.ts";

/** Where a server that ignored its arguments would listen, harmlessly. */
const LOOPBACK = { PORT: "0", HOST: "127.0.0.1" };

/**
 * `deno task start ARGS`, killed after 20 s: a server that ignores its
 * arguments and starts fails the test rather than hanging it.
 */
async function start(cwd: string, args: string[]): Promise<RunResult> {
  const child = taskCommand("start", { cwd, args, env: LOOPBACK }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
  const out = await child.output();
  clearTimeout(timer);
  const decoder = new TextDecoder();
  return {
    code: out.code,
    stdout: decoder.decode(out.stdout),
    stderr: decoder.decode(out.stderr),
  };
}

Deno.test("deno task start with an argument refuses to start, exit 2, in one line naming the environment variables", async () => {
  using checkout = tempDir();
  for (const args of [["--port", "9000"], ["serve"], ["--help", "extra"]]) {
    const result = await start(checkout.path, args);
    assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
    assert.equal(result.stdout, "");
    assert.equal(
      result.stderr,
      "The server takes no arguments; configure it with environment variables (PORT, HOST, DENO_KV_PATH, DATABASE_URL, …), see docs/operators.md#configuration or run it with --help\n",
    );
    // It did not start: nothing was opened in the working folder.
    assert.deepEqual([...Deno.readDirSync(checkout.path)], []);
  }
});

Deno.test("deno task start --help and -h list every variable the server reads and exit 0 without starting", async () => {
  using checkout = tempDir();
  for (const flag of ["--help", "-h"]) {
    const result = await start(checkout.path, [flag]);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stderr, "");
    assert.match(result.stdout, /^Usage: deno task start\n/);
    for (const name of SERVER_VARIABLES) {
      assert.match(result.stdout, new RegExp(`^  ${name} `, "m"), name);
    }
    assert.match(result.stdout, /PORT .*\(0 to 65535; default 8000\)/);
    assert.match(result.stdout, /docs\/operators\.md#configuration/);
    assert.deepEqual([...Deno.readDirSync(checkout.path)], []);
  }
});

/** The release deno.json carries, which every entrypoint reports. */
const RELEASE: string = JSON.parse(
  Deno.readTextFileSync(new URL("../../deno.json", import.meta.url)),
).version;

Deno.test("deno task start --version prints the release deno.json carries, in one line, and exits 0 without starting", async () => {
  using checkout = tempDir();
  const result = await start(checkout.path, ["--version"]);
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, `integration-service ${RELEASE}\n`);
  assert.equal(result.stderr, "");
  assert.deepEqual([...Deno.readDirSync(checkout.path)], []);
  // Named in --help, and refused beside anything else.
  assert.match(
    (await start(checkout.path, ["--help"])).stdout,
    /deno task start --version/,
  );
  assert.equal((await start(checkout.path, ["--version", "x"])).code, 2);
});

Deno.test("the server's listening line names the release deno.json carries", async () => {
  using checkout = tempDir();
  await using server = await startServer(checkout.path, LOOPBACK);
  const line = server.output().split("\n").find((text) =>
    text.includes('"msg":"listening"')
  );
  assert.ok(line, server.output());
  const { msg, address, version } = JSON.parse(line);
  assert.equal(msg, "listening");
  assert.equal(address, server.url);
  assert.equal(version, RELEASE);
});
