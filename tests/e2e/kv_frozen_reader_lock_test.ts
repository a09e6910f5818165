/**
 * A second process that holds the KV file's WAL read locks without letting
 * go, as one frozen (SIGSTOP) in the middle of a checkpoint or of the WAL's
 * recovery does, makes every Deno KV call of the server block rather than
 * fail (issue 29: a peer frozen at such a moment left a server answering
 * nothing for 11 minutes). The server answers a cached key from memory
 * while its lease lasts, then 503 within its bound, never a hang and never
 * 401; a console change fails with the store's error; and both recover
 * once the locks go. The lock is taken deterministically, by POSIX record
 * locks on the `-shm` file's read-mark bytes (SQLite's own protocol), from
 * python3: skipped without it.
 */

import assert from "node:assert/strict";
import { createKey, keys, startServer, tempDir } from "../support/processes.ts";
import { request } from "../support/http.ts";

const ROUTE = "/api/v1/integration/connection";
/** A request's longest wait on the store (lib/auth/key_lookup.ts): two leases. */
const WAIT_MS = 6000;
/** Longer than any bound under test: a request still unanswered by then hung. */
const GIVE_UP_MS = 45_000;

const python = await new Deno.Command("sh", {
  args: ["-c", "command -v python3"],
  stdout: "null",
}).output().then((o) => o.success, () => false);

/**
 * Takes exclusive locks on the WAL read marks (bytes 123-127 of the -shm
 * file: WALINDEX_LOCK_OFFSET 120 + 3, five of them), says "held", and keeps
 * them until its stdin closes.
 */
const HOLD = `
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 5, 123, os.SEEK_SET)
print("held", flush=True)
sys.stdin.read()
`;

/** The status of one request, and how long it took; "hung" past the give-up. */
async function timed(
  url: string,
  key: string,
): Promise<{ status: number | "hung"; ms: number; retryAfter: string | null }> {
  const started = performance.now();
  try {
    const response = await request(url + ROUTE, {
      headers: { "X-API-Key": key },
      signal: AbortSignal.timeout(GIVE_UP_MS),
    });
    return {
      status: response.status,
      ms: performance.now() - started,
      retryAfter: response.headers.get("retry-after"),
    };
  } catch (error) {
    if (!(error instanceof DOMException)) throw error;
    return {
      status: "hung",
      ms: performance.now() - started,
      retryAfter: null,
    };
  }
}

Deno.test({
  name:
    "KV: with another process holding the file's read locks, a server answers 503 within two leases once its lease lapses (a cached key and a never-used key alike), a console change fails with the store's error, and both recover when the locks go",
  ignore: !python,
  fn: async () => {
    using dir = tempDir();
    const cached = await createKey(dir.path, "cached");
    const fresh = await createKey(dir.path, "fresh");
    const server = await startServer(dir.path, { HOST: "127.0.0.1" });
    let holder: Deno.ChildProcess | null = null;
    try {
      assert.equal((await timed(server.url, cached.key)).status, 200);
      holder = new Deno.Command("python3", {
        args: ["-c", HOLD, `${dir.path}/data/keys.db-shm`],
        stdin: "piped",
        stdout: "piped",
        stderr: "inherit",
      }).spawn();
      const said = holder.stdout.pipeThrough(new TextDecoderStream())
        .getReader();
      assert.match((await said.read()).value ?? "", /held/);
      said.releaseLock();
      await server.waitForOutput(/"msg":"lease_lost"/);
      const late = await timed(server.url, cached.key);
      assert.equal(late.status, 503, `a cached key: ${JSON.stringify(late)}`);
      assert.ok(late.retryAfter !== null, "503 says when to retry");
      assert.ok(late.ms < WAIT_MS + 3000, `503 after ${late.ms} ms`);
      const first = await timed(server.url, fresh.key);
      assert.equal(first.status, 503, `a first use: ${JSON.stringify(first)}`);
      assert.ok(first.ms < WAIT_MS + 3000, `503 after ${first.ms} ms`);
      const changing = performance.now();
      const change = await keys(dir.path, [
        "update",
        "cached",
        "--allow-from",
        "10.0.0.0/8",
        "--yes",
      ]);
      const changeMs = performance.now() - changing;
      console.log(
        `cached key 503 in ${late.ms.toFixed(0)} ms, first use 503 in ${
          first.ms.toFixed(0)
        } ms, console change failed in ${changeMs.toFixed(0)} ms`,
      );
      assert.equal(change.code, 1, "the change did not claim success");
      assert.match(change.stderr, /^The key store .*; .*try again\n$/);
      // The locks go: the server reads the store again, unchanged (the
      // change made nothing: --allow-from 10.0.0.0/8 would refuse 127.0.0.1).
      await holder.stdin.close();
      await holder.status;
      holder = null;
      await server.waitForOutput(/"msg":"lease_held"/);
      assert.equal((await timed(server.url, cached.key)).status, 200);
      assert.equal((await timed(server.url, fresh.key)).status, 200);
    } finally {
      if (holder !== null) {
        await holder.stdin.close().catch(() => {});
        await holder.status;
      }
      await server[Symbol.asyncDispose]();
    }
  },
});
