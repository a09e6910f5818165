/**
 * Serving on a Unix socket behind a proxy on the same host: `Deno.serve`'s
 * own accept loop, with no TCP port a stranger could reach, so the proxy
 * bounds handshakes, heads, idle connections and bodies (docs/operators.md).
 *
 * @module
 */

import {
  type GuardedServer,
  rateLimitedEvents,
  type ServeEvent,
  type ServeHandler,
} from "./serve.ts";

/** SOCKET_PATH names a socket another server listens on, or a file that is no socket. */
export class SocketPathError extends Error {
  override name = "SocketPathError";
  constructor(
    readonly code: "socket_in_use" | "not_a_socket",
    message: string,
  ) {
    super(message);
  }
}

/** Where a server behind a proxy on the same host listens. */
export interface SocketOptions {
  /** The Unix socket's path; a stale socket there is replaced. */
  path: string;
  onListen?: (addr: Deno.UnixAddr) => void;
  onEvent?: (event: ServeEvent) => void;
}

/**
 * Serves `handler` on a Unix socket with `Deno.serve`'s own accept loop and
 * no connection guard: for nginx on the same host (deploy/nginx.conf), which
 * is then the only client. The guard's limits are the proxy's there: it
 * bounds the TLS handshake, the head, idle connections and bodies before a
 * request reaches the socket, and its `max_conns` keeps the connections it
 * opens here below this process's descriptors (`Deno.serve` still stops on
 * the first accept error). Measured behind nginx, this path took about a
 * fifth less CPU per request than the guard and 12 MB less memory at 128
 * connections (docs/performance.md).
 *
 * Who may connect is decided by the socket file's folder: give it one only
 * the service's user and nginx's group can enter.
 */
export async function serveOnSocket(
  handler: ServeHandler,
  options: SocketOptions,
): Promise<GuardedServer> {
  await _removeStaleSocket(options.path);
  const report = rateLimitedEvents(options.onEvent);
  const server = Deno.serve({
    path: options.path,
    onListen: (addr) => options.onListen?.(addr),
    onError: (error) => {
      report({
        msg: "request failed",
        error: error instanceof Error ? error.name : typeof error,
      });
      return new Response(null, { status: 500 });
    },
  }, handler);
  // Deno removes its socket as it closes; one a crash leaves behind is
  // replaced by the next start.
  const finished = server.finished;
  return {
    addr: server.addr,
    finished,
    shutdown: async () => {
      await server.shutdown();
      await finished;
    },
    // Deno.serve does not count its connections; nginx bounds them.
    connectionCount: () => NaN,
  };
}

/**
 * Clears the way to listen at `path`: nothing there is fine; a socket left
 * by a server that is gone is removed; a socket a server still listens on,
 * or anything that is not a socket, is refused, as removing it would take
 * that server off the proxy or delete the operator's file.
 */
async function _removeStaleSocket(path: string): Promise<void> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return;
    throw error;
  }
  if (info.isSocket !== true) {
    throw new SocketPathError(
      "not_a_socket",
      `${path} exists and is not a socket; SOCKET_PATH must name a socket or nothing`,
    );
  }
  try {
    (await Deno.connect({ transport: "unix", path })).close();
  } catch {
    // Nobody answers: left behind by a server that stopped without removing it.
    await Deno.remove(path);
    return;
  }
  throw new SocketPathError(
    "socket_in_use",
    `another server is listening on ${path}; stop it, or give each server its own SOCKET_PATH`,
  );
}
