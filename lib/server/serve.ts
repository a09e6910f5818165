/**
 * HTTP/1.1 and HTTP/2 with the connection controls `Deno.serve` lacks in
 * Deno 2.9: its accept loop ends the server on the first accept error, so
 * EMFILE under a flood exits the process (denoland/deno#10148); it has no
 * header or keep-alive timeout (denoland/deno#3515, #32497); it never shows
 * JavaScript a connection; and it reads an unread request body to its end.
 *
 * So this module owns the accept loop and hands each connection to Deno's
 * own HTTP engine through the internal `serveHttpOnConnection` (as Deno's
 * tests do): no byte passes through JavaScript, and an abort signal drops
 * the connection in Rust, fd included.
 *
 * @module
 */

import { FairSlots, type Slot, slotAddress } from "./fair_slots.ts";

export interface ConnectionLimits {
  /** For a new connection's first complete request head. */
  headerTimeoutMs: number;
  /** For a connection with no request in progress. */
  idleTimeoutMs: number;
  /** At the cap the busiest client address gives up the connection it opened first. */
  maxConnections: number;
  /** After answering a request whose body nobody reads, the connection lives this long, so the answer leaves but the body is not read. */
  bodyLingerMs: number;
  /** On shutdown, requests in progress may take this long; then they are cut. */
  shutdownGraceMs: number;
}

/** docs/operators.md lists the same. */
export const DEFAULT_LIMITS: ConnectionLimits = {
  headerTimeoutMs: 10_000,
  idleTimeoutMs: 30_000,
  maxConnections: 900,
  bodyLingerMs: 10,
  shutdownGraceMs: 10_000,
};

/** Something worth a log line, reported at most once a second per kind. */
export interface ServeEvent {
  msg: "accept failed" | "connections shed" | "request failed";
  [field: string]: unknown;
}

export interface ServeOptions {
  hostname: string;
  port: number;
  /** SO_REUSEPORT (Linux): the kernel spreads connections over the processes. */
  reusePort?: boolean;
  /** PEM: HTTPS with HTTP/2 and HTTP/1.1 by ALPN. */
  tls?: { cert: string; key: string } | null;
  limits?: Partial<ConnectionLimits>;
  onListen?: (addr: Deno.NetAddr | Deno.UnixAddr) => void;
  onEvent?: (event: ServeEvent) => void;
}

/** A running server, shaped like `Deno.HttpServer`. */
export interface GuardedServer {
  readonly addr: Deno.NetAddr | Deno.UnixAddr;
  /** Resolves once the server has stopped and every connection is closed. */
  readonly finished: Promise<void>;
  /** Stops accepting, lets requests in progress finish, then resolves. */
  shutdown(): Promise<void>;
  connectionCount(): number;
}

export type ServeHandler = (
  request: Request,
  info: Deno.ServeHandlerInfo<Deno.NetAddr | Deno.UnixAddr>,
) => Response | Promise<Response>;

/** Deno lacks the internal this module is built on. */
export class ServeUnsupportedError extends Error {
  override name = "ServeUnsupportedError";
  readonly code = "serve_unsupported";
}

type ServeOnConnection = (
  connection: Deno.Conn,
  signal: AbortSignal,
  handler: ServeHandler,
  onError: (error: unknown) => Response,
  onListen: () => void,
) => { finished: Promise<void>; shutdown(): Promise<void> };

function _serveOnConnection(): ServeOnConnection {
  const deno = Deno as unknown as Record<symbol, unknown> & {
    internal: symbol;
  };
  const internals = deno[deno.internal] as
    | { serveHttpOnConnection?: unknown }
    | undefined;
  const serveOn = internals?.serveHttpOnConnection;
  if (typeof serveOn !== "function") {
    throw new ServeUnsupportedError(
      `This Deno (${Deno.version.deno}) cannot serve HTTP on an accepted connection; run the Deno version the Dockerfile names`,
    );
  }
  return serveOn as ServeOnConnection;
}

class _Connection {
  readonly abort = new AbortController();
  /** Handlers not returned yet (HTTP/2 runs several). */
  inFlight = 0;
  /** 0: the first head is still awaited. */
  requests = 0;
  /** Accepted, or a handler returned. */
  quietSince = performance.now();
  bodyUnread = false;
  closed = false;
  server?: { shutdown(): Promise<void> };
  slot?: Slot<_Connection>;

  close(): void {
    if (this.closed) return;
    this.closed = true;
    // Released now, not when Deno reports it gone, so the next newcomer at
    // the cap closes another connection rather than this one again.
    this.slot?.release();
    abortConnection(this.abort);
  }
}

/** Aborts, surviving the BadResource Deno's abort listener throws when the peer closed first. */
export function abortConnection(controller: AbortController): void {
  _installCloseGuard();
  _closing++;
  try {
    controller.abort();
  } finally {
    _closing--;
  }
}

// Deno reports that BadResource as uncaught, which ends the process: only it,
// during one of our closes, is kept from doing so; every other is left alone.
let _closing = 0;
let _closeGuardInstalled = false;

function _installCloseGuard(): void {
  if (_closeGuardInstalled) return;
  _closeGuardInstalled = true;
  globalThis.addEventListener("error", (event) => {
    if (_closing > 0 && event.error instanceof Deno.errors.BadResource) {
      event.preventDefault();
    }
  });
}

/** Never stops on its own: an accept error sheds idle connections and retries after a growing pause. */
export function serveGuarded(
  handler: ServeHandler,
  options: ServeOptions,
): GuardedServer {
  const serveOn = _serveOnConnection();
  const limits = { ...DEFAULT_LIMITS, ...options.limits };
  const listener: Deno.Listener = options.tls
    ? Deno.listenTls({
      hostname: options.hostname,
      port: options.port,
      cert: options.tls.cert,
      key: options.tls.key,
      alpnProtocols: ["h2", "http/1.1"],
      reusePort: options.reusePort,
    })
    : Deno.listen({
      hostname: options.hostname,
      port: options.port,
      reusePort: options.reusePort,
    });
  const addr = listener.addr as Deno.NetAddr;
  const connections = new Set<_Connection>();
  const slots = new FairSlots<_Connection>();
  const finishing = new Set<Promise<void>>();
  const report = rateLimitedEvents(options.onEvent);
  let stopping = false;
  let shed = 0;

  const onError = (error: unknown): Response => {
    report({
      msg: "request failed",
      error: error instanceof Error ? error.name : typeof error,
    });
    return new Response(null, { status: 500 });
  };

  /** Closes up to `count` connections with no request in progress, heaviest address first. */
  const shedIdle = (count: number) => {
    for (let idle; count-- > 0 && (idle = slots.idlest()); shed++) idle.close();
  };

  const sweep = () => {
    const now = performance.now();
    for (const connection of connections) {
      if (connection.inFlight === 0) {
        const limit = connection.requests === 0
          ? limits.headerTimeoutMs
          : limits.idleTimeoutMs;
        if (now - connection.quietSince >= limit) connection.close();
      }
    }
    if (shed > 0) {
      report({ msg: "connections shed", count: shed, open: connections.size });
      shed = 0;
    }
  };
  // The sweep's period bounds how late a timeout fires.
  const tickMs = Math.max(
    50,
    Math.min(1000, limits.headerTimeoutMs / 4, limits.idleTimeoutMs / 4),
  );
  const sweeper = setInterval(sweep, tickMs);

  const serveConnection = (conn: Deno.Conn, address: string) => {
    const connection = new _Connection();
    connections.add(connection);
    connection.slot = slots.add(address, connection);
    const wrapped: ServeHandler = (request, info) => {
      connection.inFlight++;
      // Idle or not: out of descriptors, or for a newcomer of its own
      // address, only idle connections are closed.
      connection.slot?.busy(true);
      connection.requests++;
      // Deno reads an unread body to its end before it closes the
      // connection: the connection is dropped shortly after the response.
      if (_announcesBody(request)) connection.bodyUnread = true;
      let result;
      try {
        result = handler(request, info);
      } catch (error) {
        result = Promise.reject(error);
      }
      return _settle(connection, result, limits.bodyLingerMs);
    };
    let server;
    try {
      server = serveOn(
        conn,
        connection.abort.signal,
        wrapped,
        onError,
        () => {},
      );
    } catch (error) {
      connections.delete(connection);
      connection.slot.release();
      report({ msg: "accept failed", error: _errorCode(error) });
      _closeQuietly(conn);
      return;
    }
    const done: Promise<void> = server.finished
      .catch(() => {
        // A peer that resets or a forced close: nothing to report.
      })
      .finally(() => {
        connection.closed = true;
        connection.slot?.release();
        connections.delete(connection);
        finishing.delete(done);
      });
    finishing.add(done);
    connection.server = server;
  };

  const acceptLoop = async () => {
    let pauseMs = 0;
    while (!stopping) {
      let conn: Deno.Conn;
      try {
        conn = await listener.accept();
      } catch (error) {
        if (stopping) break;
        const code = _errorCode(error);
        if (_EXHAUSTION_CODES.has(code)) shedIdle(8);
        pauseMs = Math.min(1000, pauseMs === 0 ? 10 : pauseMs * 2);
        report({ msg: "accept failed", error: code, pauseMs });
        await new Promise((resolve) => setTimeout(resolve, pauseMs));
        continue;
      }
      pauseMs = 0;
      if (stopping) {
        _closeQuietly(conn);
        break;
      }
      const address = slotAddress((conn.remoteAddr as Deno.NetAddr).hostname);
      if (slots.size >= limits.maxConnections) {
        // The heaviest address pays, so none can hold every slot from others,
        // with the connection it opened first: requests come at the server's
        // own pace, so only new connections can push a newcomer to the front.
        shed++;
        const room = slots.makeRoomFor(address);
        if (!room) {
          _closeQuietly(conn);
          continue;
        }
        room.close();
      }
      serveConnection(conn, address);
    }
  };

  let shutdownPromise: Promise<void> | undefined;
  const shutdown = () => {
    shutdownPromise ??= (async () => {
      stopping = true;
      _closeQuietly(listener);
      for (const connection of connections) {
        // Idle ones close at once; busy ones finish their requests first.
        connection.server?.shutdown().catch(() => {});
      }
      await accepting;
      // Requests in progress get a bounded time to finish; then their
      // connections are closed, so a stop can never hang on one.
      const grace = setTimeout(() => {
        for (const connection of connections) connection.close();
      }, limits.shutdownGraceMs);
      while (finishing.size > 0) await Promise.all([...finishing]);
      clearTimeout(grace);
      clearInterval(sweeper);
    })();
    return shutdownPromise;
  };

  const accepting = acceptLoop();
  options.onListen?.(addr);
  const finished = accepting.then(() => shutdown());

  return {
    addr,
    finished,
    shutdown,
    connectionCount: () => connections.size,
  };
}

const _EXHAUSTION_CODES = new Set(["EMFILE", "ENFILE", "ENOBUFS", "ENOMEM"]);

function _settle(
  connection: _Connection,
  result: Response | Promise<Response>,
  bodyLingerMs: number,
): Response | Promise<Response> {
  const quiet = () => {
    connection.slot?.busy(--connection.inFlight > 0);
    connection.quietSince = performance.now();
    // Once no other request (an HTTP/2 stream) still needs the connection.
    if (connection.bodyUnread && connection.inFlight === 0) {
      setTimeout(() => connection.close(), bodyLingerMs);
    }
  };
  // A plain Response stays one: Deno answers those on its fastest path.
  if (!(result instanceof Promise)) {
    quiet();
    return result;
  }
  return result.then(
    (response) => {
      quiet();
      return response;
    },
    (error) => {
      quiet();
      throw error;
    },
  );
}

/** HTTP/1.1 can frame a request body only by these two headers. */
function _announcesBody(request: Request): boolean {
  const length = request.headers.get("content-length");
  return (length !== null && length !== "0") ||
    request.headers.has("transfer-encoding");
}

function _closeQuietly(resource: { close(): void }): void {
  try {
    resource.close();
  } catch { /* already closed */ }
}

function _errorCode(error: unknown): string {
  if (error && typeof error === "object" && "code" in error) {
    return String((error as { code: unknown }).code);
  }
  return error instanceof Error ? error.name : typeof error;
}

/** Passes each kind of event on at most once a second, counting the rest. */
export function rateLimitedEvents(
  sink: ((event: ServeEvent) => void) | undefined,
): (event: ServeEvent) => void {
  if (!sink) return () => {};
  const last = new Map<string, { at: number; dropped: number }>();
  return (event) => {
    const now = performance.now();
    const seen = last.get(event.msg);
    if (seen && now - seen.at < 1000) {
      seen.dropped++;
      return;
    }
    const dropped = seen?.dropped ?? 0;
    last.set(event.msg, { at: now, dropped: 0 });
    sink(dropped > 0 ? { ...event, suppressed: dropped } : event);
  };
}
