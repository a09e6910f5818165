/**
 * The request log goes to stdout, read by whatever the operator pipes it
 * to. A reader that dies or stalls must not take the service with it.
 */

import assert from "node:assert/strict";
import { createKey, taskCommand, tempDir } from "../support/processes.ts";
import { GIVE_UP_MS, until } from "../support/wait.ts";

const ROUTE = "/api/v1/integration/connection";

/** Starts the server with stdout piped; returns it, its port and its stderr text. */
async function serverWithPipedLog(cwd: string) {
  const child = taskCommand("start", { cwd, env: { PORT: "0" } }).spawn();
  const reader = child.stdout.getReader();
  let text = "";
  const decoder = new TextDecoder();
  let port = 0;
  while (port === 0) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the server did not start: ${text}`);
    text += decoder.decode(value);
    port = Number(text.match(/"address":"http:\/\/[^"]*:(\d+)"/)?.[1] ?? 0);
  }
  let stderr = "";
  const stderrDone = (async () => {
    for await (const chunk of child.stderr) stderr += decoder.decode(chunk);
  })();
  return { child, reader, port, stderr: () => stderr, stderrDone };
}

async function calls(port: number, key: string, count: number) {
  const statuses: number[] = [];
  for (let i = 0; i < count; i++) {
    const response = await fetch(`http://127.0.0.1:${port}${ROUTE}`, {
      headers: { "X-API-Key": key },
    });
    await response.body?.cancel();
    statuses.push(response.status);
  }
  return statuses;
}

Deno.test("the server keeps serving after the program reading its log exits", async () => {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "monitoring");
  const server = await serverWithPipedLog(dir.path);
  try {
    await server.reader.cancel(); // the log shipper goes away: a broken pipe
    const statuses = await calls(server.port, key, 50);
    // The server has found its log gone (a flush failed): waited for by
    // what it says, then it must still serve.
    await until(
      () => /The request log stopped/.test(server.stderr()),
      "the server to find its log gone",
    );
    statuses.push(...await calls(server.port, key, 50));
    assert.ok(statuses.every((s) => s === 200), statuses.join(","));
  } finally {
    server.child.kill();
    await server.child.status;
    await server.stderrDone;
  }
  assert.match(
    server.stderr(),
    /The request log stopped: stdout cannot be written/,
  );
  assert.ok(!server.stderr().includes(key.slice(4)));
});

Deno.test("the server keeps serving while the program reading its log stalls", async () => {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "monitoring");
  const server = await serverWithPipedLog(dir.path);
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    // Nobody reads: the pipe's 64 KiB fill after a few hundred lines. A
    // request held up by the log would wait for ever, as nothing will read
    // the pipe: the bound only has to end that, not to judge a speed.
    const statuses = await Promise.race([
      calls(server.port, key, 3000),
      new Promise<never>((_, reject) =>
        timer = setTimeout(
          () => reject(new Error("requests were held up by the log")),
          GIVE_UP_MS,
        )
      ),
    ]).finally(() => clearTimeout(timer));
    assert.ok(statuses.every((s) => s === 200));
    // And it still stops on SIGTERM, giving up the lines it cannot write.
    const stopping = performance.now();
    server.child.kill("SIGTERM");
    assert.equal((await server.child.status).code, 0);
    assert.ok(performance.now() - stopping < 5000, "the stop hung on the log");
  } finally {
    try {
      server.child.kill();
    } catch {
      // stopped above
    }
    await server.child.status;
    await server.reader.cancel().catch(() => {});
    await server.stderrDone;
  }
});
