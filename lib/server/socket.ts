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
    readonly code: "socket_in_use" | "not_a_socket" | "no_folder",
    message: string,
  ) {
    super(message);
  }
}

export interface SocketOptions {
  /** A stale socket there is replaced. */
  path: string;
  onListen?: (addr: Deno.UnixAddr) => void;
  onEvent?: (event: ServeEvent) => void;
}

/**
 * Serves on a Unix socket with `Deno.serve`'s own accept loop, no guard: for
 * nginx on the same host (deploy/nginx.conf), the only client, which bounds
 * handshakes, heads, idle connections and bodies, and whose `max_conns`
 * keeps this process below its descriptors (`Deno.serve` still stops on the
 * first accept error). Behind nginx this took a fifth less CPU per request
 * and 12 MB less memory than the guard (docs/performance.md). Who may
 * connect is decided by the socket file's folder.
 */
export async function serveOnSocket(
  handler: ServeHandler,
  options: SocketOptions,
): Promise<GuardedServer> {
  await _removeStaleSocket(options.path);
  const report = rateLimitedEvents(options.onEvent);
  const server = serveOn(options.path, () =>
    Deno.serve({
      path: options.path,
      onListen: (addr) => options.onListen?.(addr),
      onError: (error) => {
        report({
          msg: "request failed",
          error: error instanceof Error ? error.name : typeof error,
        });
        return new Response(null, { status: 500 });
      },
    }, handler));
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

/** Runs `serve`, naming SOCKET_PATH when its folder is missing (Deno says only "No such file"). */
function serveOn<T>(path: string, serve: () => T): T {
  try {
    return serve();
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
    throw new SocketPathError(
      "no_folder",
      `the folder of SOCKET_PATH ${path} does not exist; create it (for nginx, a folder both may use) or set SOCKET_PATH to a path in one`,
    );
  }
}

/** Removes a gone server's socket; never a live one (off the proxy) or another file (the operator's). */
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
