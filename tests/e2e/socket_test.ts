/**
 * SOCKET_PATH: the server on a Unix socket for nginx on the same host. A
 * request's client is the proxy's X-Forwarded-For; a socket left by a
 * crash is replaced, while one a server still listens on, or a file that
 * is not a socket, stops the start rather than being removed.
 */

import assert from "node:assert/strict";
import {
  createKey,
  refusedStart,
  startServer,
  tempDir,
} from "../support/processes.ts";

const ROUTE = "/api/v1/integration/connection";

async function viaSocket(
  path: string,
  headers: Record<string, string>,
): Promise<Response> {
  using client = Deno.createHttpClient({
    proxy: { transport: "unix", path },
  });
  const response = await fetch(`http://localhost${ROUTE}`, {
    client,
    headers,
    signal: AbortSignal.timeout(5000),
  });
  await response.body?.cancel();
  return response;
}

Deno.test("on SOCKET_PATH a valid key gets 200 and the log names the client the proxy forwarded; a second server on the same socket stops", async () => {
  using dir = tempDir();
  const socket = `${dir.path}/service.sock`;
  await using server = await startServer(dir.path, { SOCKET_PATH: socket });
  assert.equal(server.url, `unix:${socket}`);
  const { key, id } = await createKey(dir.path, "socket");
  const response = await viaSocket(socket, {
    "X-API-Key": key,
    "X-Forwarded-For": "203.0.113.7",
  });
  assert.equal(response.status, 200);
  const second = await refusedStart(dir.path, { SOCKET_PATH: socket });
  assert.equal(second.code, 1, second.output);
  assert.match(second.output, /another server is listening on/);
  // The first still answers: its socket was not taken from it.
  assert.equal(
    (await viaSocket(socket, { "X-API-Key": key })).status,
    200,
  );
  await server.stop();
  assert.match(
    server.output(),
    new RegExp(`"client":"203\\.0\\.113\\.7","apiKeyId":${id}`),
  );
  assert.doesNotMatch(server.output(), new RegExp(key.slice(4)));
});

Deno.test("a socket left by a server killed outright is replaced at the next start; a regular file at SOCKET_PATH, or a missing folder, stops it and names SOCKET_PATH", async () => {
  using dir = tempDir();
  const socket = `${dir.path}/service.sock`;
  const killed = await startServer(dir.path, { SOCKET_PATH: socket });
  await killed.stop("SIGKILL");
  assert.ok((await Deno.lstat(socket)).isSocket, "the socket was left");
  await using again = await startServer(dir.path, { SOCKET_PATH: socket });
  const { key } = await createKey(dir.path, "after-crash");
  assert.equal((await viaSocket(socket, { "X-API-Key": key })).status, 200);
  await again.stop();

  const file = `${dir.path}/not-a-socket`;
  await Deno.writeTextFile(file, "keep me");
  const refused = await refusedStart(dir.path, { SOCKET_PATH: file });
  assert.equal(refused.code, 1, refused.output);
  assert.match(refused.output, /exists and is not a socket/);
  assert.equal(await Deno.readTextFile(file), "keep me");

  const nowhere = `${dir.path}/no-such-folder/service.sock`;
  const missing = await refusedStart(dir.path, { SOCKET_PATH: nowhere });
  assert.equal(missing.code, 1, missing.output);
  assert.match(missing.output, /folder of SOCKET_PATH .* does not exist/);
  assert.doesNotMatch(missing.output, /TLS_CERT_FILE/);
});
