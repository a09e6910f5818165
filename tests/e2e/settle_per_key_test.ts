/**
 * Review finding 3 (issue 29), end to end: two servers on one store, one
 * frozen with SIGSTOP, the console revoking ANOTHER key and waiting for the
 * frozen one. A valid key never used before is answered by the live server
 * at once, not after the frozen server's lease: the live server waits for
 * the last change that altered the key it read, not the store's.
 *
 * Judged by the service's own events: the console's line that it waits for
 * the frozen server, the live server's request line and its `durationMs`
 * (against the lease), and the console's line that the lease ran out.
 */

import assert from "node:assert/strict";
import {
  createKey,
  type ServerProcess,
  startServer,
  taskCommand,
  tempDir,
} from "../support/processes.ts";
import { freshDatabase, NO_DATABASE, signal } from "../support/postgres.ts";
import { LEASE_MS } from "../../lib/auth/lease.ts";
import { until } from "../support/wait.ts";

const ROUTE = "/api/v1/integration/connection";

/** The state letter of a process in /proc (T: stopped by a signal). */
function processState(pid: number): string {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
}

/**
 * A console command whose stderr lines are read as they come, each with
 * when it arrived (performance.now()).
 */
function watchedConsole(
  cwd: string,
  args: string[],
  env: Record<string, string>,
) {
  const child = taskCommand("keys", { cwd, args, env }).spawn();
  const lines: { text: string; at: number }[] = [];
  const stdout = new Response(child.stdout).text();
  const read = (async () => {
    let partial = "";
    for await (
      const chunk of child.stderr.pipeThrough(new TextDecoderStream())
    ) {
      const at = performance.now();
      const parts = (partial + chunk).split("\n");
      partial = parts.pop()!;
      for (const text of parts) lines.push({ text, at });
    }
  })();
  return {
    lines,
    async done() {
      await read;
      await stdout;
      return (await child.status).code;
    },
  };
}

for (const postgres of [false, true]) {
  const label = postgres ? "PostgreSQL" : "KV";
  Deno.test({
    name:
      `${label}: with a server frozen and a change to another key waiting for it, a never-used valid key's first request on the live server is answered well within the lease`,
    ignore: postgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using database = postgres ? await freshDatabase() : null;
      const env: Record<string, string> = database === null
        ? {}
        : { DATABASE_URL: database.url };
      const servers: ServerProcess[] = await Promise.all(
        [0, 1].map(() =>
          startServer(dir.path, { HOST: "127.0.0.1", ...env }, "start", {
            keepOutput: true,
          })
        ),
      );
      const [live, frozen] = servers;
      try {
        const pid = frozen.process.pid;
        for (let attempt = 1;; attempt++) {
          const honest = await createKey(
            dir.path,
            `honest${attempt}`,
            undefined,
            env,
          );
          await createKey(dir.path, `other${attempt}`, undefined, env);
          signal(pid, "SIGSTOP");
          await until(() => processState(pid) === "T", `pid ${pid} to stop`);
          const revoke = watchedConsole(
            dir.path,
            ["revoke", `other${attempt}`, "--yes"],
            env,
          );
          let exited = false;
          const code = revoke.done().finally(() => exited = true);
          const waiting = () =>
            revoke.lines.some(({ text }) => /Waiting up to/.test(text));
          // The revoke is committed and waits for the frozen server.
          await until(
            () => waiting() || exited,
            "the console to wait for the frozen server",
          );
          if (!waiting()) {
            // A console slow to start (a loaded machine) committed after the
            // live server had removed the frozen one's registration, its
            // lease run out unrenewed: nobody was owed, so nothing to judge.
            assert.ok(attempt < 3, "the console never waited for the server");
            await code;
            signal(pid, "SIGCONT");
            continue;
          }
          const response = await fetch(live.url + ROUTE, {
            headers: { "X-API-Key": honest.key },
          });
          await response.body?.cancel();
          const answeredAt = performance.now();
          assert.equal(response.status, 200);
          assert.equal(await code, 0);
          const lapsed = revoke.lines.find(({ text }) =>
            /did not confirm before its lease ran out|stopped, or lost its lease, before confirming/
              .test(text)
          );
          assert.ok(lapsed, revoke.lines.map(({ text }) => text).join("\n"));
          // Answered while the console still waited for the frozen server.
          assert.ok(
            answeredAt < lapsed.at,
            "answered only once the frozen server's lease ran out",
          );
          // The live server's own measure of the request, against the lease.
          const [, ms] = await live.waitForOutput(
            new RegExp(
              `"msg":"request"[^\\n]*"status":200,"durationMs":([0-9.]+)[^\\n]*"apiKeyId":${honest.id}\\b`,
            ),
          );
          const took = Number(ms);
          assert.ok(
            took < LEASE_MS / 4,
            `the first request took ${took} ms, against a lease of ${LEASE_MS} ms`,
          );
          break;
        }
      } finally {
        signal(frozen.process.pid, "SIGCONT");
        await Promise.all(servers.map((server) => server.stop()));
      }
    },
  });
}
