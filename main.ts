/**
 * The service entrypoint: reads the configuration, opens the store and
 * serves the handler. All behaviour lives in `lib/`.
 *
 * @module
 */

import { BackgroundWrites } from "./lib/util/background.ts";
import {
  ConfigError,
  envFileNames,
  processEnv,
  readConfig,
} from "./lib/server/config.ts";
import { createHandler } from "./lib/server/handler.ts";
import {
  readStartArguments,
  StartArgumentsError,
  startHelp,
} from "./lib/server/arguments.ts";
import { LastUsedRecorder } from "./lib/usage/last_used.ts";
import { Lease } from "./lib/auth/lease.ts";
import { LockoutTracker } from "./lib/auth/lockout.ts";
import { Peers } from "./lib/auth/peers.ts";
import { RateLimiter } from "./lib/auth/rate_limit.ts";
import { ShareLedger, shareWaitMs } from "./lib/auth/share_ledger.ts";
import {
  PermissionsMissingError,
  requireGrants,
  SERVER_VARIABLES,
  serverGrants,
  variableGrants,
} from "./lib/server/permissions.ts";
import { JsonLog } from "./lib/http/log.ts";
import { VERSION as version, versionLine } from "./lib/util/version.ts";
import {
  type GuardedServer,
  serveGuarded,
  ServeUnsupportedError,
} from "./lib/server/serve.ts";
import { serveOnSocket, SocketPathError } from "./lib/server/socket.ts";
import { acknowledged } from "./lib/store/acknowledged.ts";
import { StoreOpenError, StoreUnavailableError } from "./lib/store/errors.ts";
import { counted } from "./lib/store/counted.ts";
import { Figures } from "./lib/server/figures.ts";
import { serveMetrics } from "./lib/server/metrics.ts";
import { documentedRoutes } from "./lib/routes/table.ts";
import { openStore } from "./lib/store/open.ts";
import { UsageRecorder } from "./lib/usage/networks.ts";
import { WebhookSender } from "./lib/webhooks/sender.ts";

/** The start task's own flags, for the command a refusal prints. */
const RUN_FLAGS = ["-q", "--no-prompt", "--env-file"];

/** Starts the server; resolves once it has stopped after SIGTERM or SIGINT. */
export async function serve(): Promise<void> {
  const refusal = { task: "start", entrypoint: "main.ts", runFlags: RUN_FLAGS };
  // Unreadable, a variable would quietly count as unset and its default apply.
  requireGrants(variableGrants(SERVER_VARIABLES), refusal);
  const config = readConfig(processEnv, {
    envFileNames: () => envFileNames(),
  });
  // Before anything listens or opens: one line naming what is missing.
  requireGrants(serverGrants(config), refusal);
  const log = new JsonLog();
  const stopping = stopSignal(() => {
    log.write({ msg: "stopping" });
    // The last resort: whatever hangs, a stop ends within bounded time.
    const force = setTimeout(() => {
      console.error(
        "The stop took longer than 20 s; exiting without waiting further",
      );
      Deno.exit(1);
    }, 20_000);
    Deno.unrefTimer(force);
  });
  const tls = config.tls && {
    cert: await Deno.readTextFile(config.tls.certFile),
    key: await Deno.readTextFile(config.tls.keyFile),
  };
  // Counted, so that what the traffic costs the store can be seen; timed
  // only for /metrics.
  const opened = counted(await openStore(config.store), {
    timed: config.metrics
      ? (method, seconds) => figures.storeCall(method, seconds)
      : undefined,
  });
  const lease = new Lease(opened.store, {
    log: (fields) => log.write(fields),
    figures: () => figures.snapshot(),
  });
  const figures: Figures = new Figures({
    routes: documentedRoutes().map((route) => route.path),
    lockSeconds: config.lockout.lockSeconds,
    lease,
  });
  // A change this server makes (a retirement) waits for every server's
  // acknowledgement, its own included, which the poke hurries.
  const store = acknowledged(opened.store, {
    onCommitted: () => lease.poke(),
  });
  const lastUsed = new LastUsedRecorder(store, {
    log: (fields) => log.write(fields),
  });
  const usage = new UsageRecorder(store, {
    log: (fields) => log.write(fields),
  });
  const background = new BackgroundWrites();
  // Webhook deliveries, from the store's outbox: never on a request's path.
  const webhooks = new WebhookSender(store, {
    retryBaseMs: config.webhooks.retrySeconds * 1000,
    expiringDays: config.webhooks.expiringDays,
    hosts: config.webhooks.hosts,
    log: (fields) => log.write(fields),
  });
  // The servers sharing the store, as their registrations show them: each
  // key's rate limit is split among them, with no store call per request.
  const peers = new Peers(store, {
    self: () => lease.id,
    onChange: (servers) => log.write({ msg: "peers", servers }),
  });
  // Past its share a server borrows from another's (lib/auth/share_ledger.ts):
  // checked at each lease poll, never on a request within its share.
  const rateLimiter = new RateLimiter();
  const shares = new ShareLedger(store.shares, {
    self: () => lease.id,
    held: () => lease.held,
    peers,
    used: (counter) => rateLimiter.used(counter),
    frees: (counter, share) => rateLimiter.freesInMs(counter, share),
    registered: async () => (await store.instances()).map(({ id }) => id),
    waitMs: () => shareWaitMs(lease.pollMs),
  });
  lease.onPoll(() => shares.poll());
  const handler = createHandler(store, {
    background,
    lastUsed,
    usage,
    lockout: new LockoutTracker(config.lockout),
    trustedProxies: config.trustedProxies,
    log: (fields) => log.write(fields),
    logRequest: (line) => {
      figures.request(line);
      log.request(line);
    },
    lease,
    peers,
    shares,
    rateLimiter,
    leakedKeyAction: config.leakedKeyAction,
    counts: figures,
  });
  const onListen = (addr: Deno.NetAddr | Deno.UnixAddr) => {
    if ("path" in addr) {
      log.write({ msg: "listening", address: `unix:${addr.path}`, version });
    } else {
      const scheme = tls ? "https" : "http";
      const address = `${scheme}://${hostPort(addr)}`;
      log.write({ msg: "listening", address, version });
    }
    log.flush();
  };
  const onEvent = (event: Record<string, unknown>) => log.write(event);
  const timeouts = {
    headerTimeoutMs: config.connections.headerTimeoutSeconds * 1000,
    idleTimeoutMs: config.connections.idleTimeoutSeconds * 1000,
  };
  // Before the port is tried below: were it the same one, taken here, the
  // start fails there rather than after registering.
  const metrics = config.metrics &&
    serveMetrics(() => figures.read(), {
      ...config.metrics,
      limits: timeouts,
      onEvent: (event) => log.write({ ...event, listener: "metrics" }),
      onListen: (addr) => {
        log.write({
          msg: "metrics_listening",
          address: `http://${hostPort(addr)}/metrics`,
        });
      },
    });
  if (config.socketPath === null && config.port !== 0) {
    // A port in use fails the start here, before it registers: even a
    // registration removed at once would change every share for a listing.
    Deno.listen({
      hostname: config.hostname,
      port: config.port,
      reusePort: config.reusePort,
    }).close();
  }
  try {
    // Registered and holding a lease before the first request, if the store
    // answers; if not, requests read the store until it does.
    if (!stopping.heard) await lease.start();
    // After the registration, so that this server counts itself from the
    // first listing on.
    if (!stopping.heard) await peers.start();
    // The lent shares known before the first request: a server starting
    // holds none of a key whose shares were lent until it claims some.
    if (!stopping.heard) await shares.poll().catch(() => {});
    if (!stopping.heard) webhooks.start();
    // Behind nginx on a socket only it can open, Deno's own path (see
    // lib/server/serve.ts); anywhere a port is exposed, the connection guard.
    const server: GuardedServer | null = stopping.heard
      ? null
      : config.socketPath !== null
      ? await serveOnSocket(handler, {
        path: config.socketPath,
        onListen,
        onEvent,
      })
      : serveGuarded(handler, {
        port: config.port,
        hostname: config.hostname,
        reusePort: config.reusePort,
        tls,
        limits: {
          ...timeouts,
          maxConnections: config.connections.maxConnections,
        },
        onListen,
        onEvent,
      });
    if (server !== null) {
      // shutdown() stops accepting, lets in-flight requests finish, then
      // resolves `finished`.
      await Promise.race([stopping, server.finished]);
      await server.shutdown();
    }
  } finally {
    // Deliveries in flight are cut off and recorded as stopped, due again at
    // once for any server, while the store is open: otherwise each stays
    // claimed (sent again only when the claim runs out) and one a receiver
    // answered just now is sent twice.
    await webhooks.stop();
    // Stops answering from memory, then deregisters, however the run ended
    // (a failed start too): no change waits for a server that is gone, and
    // no share counts it.
    await lease.stop();
    await peers.stop();
    await metrics?.shutdown();
  }
  // A key marked exposed or found expired by the last requests is written
  // down before the store closes (each write is bounded by the store's own
  // time limits, and the whole stop by the 20 s above).
  await background.settled();
  await lastUsed.close();
  await usage.close();
  await store.close();
  log.write({ msg: "stopped", storeCalls: opened.counts() });
  log.flush();
  // A stalled log reader must not keep a stopping server alive for ever.
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    log.settled(),
    new Promise((resolve) => timer = setTimeout(resolve, 2000)),
  ]);
  clearTimeout(timer);
}

if (import.meta.main) {
  try {
    // Before the permissions are checked: --help and --version need none.
    const request = readStartArguments(Deno.args);
    if (request !== "serve") {
      console.log(request === "help" ? startHelp() : versionLine());
      Deno.exit(0);
    }
    await serve();
    // Whatever the log could not write by now is given up.
    Deno.exit(0);
  } catch (error) {
    console.error(startFailure(error));
    Deno.exit(error instanceof StartArgumentsError ? error.exitCode : 1);
  }
}

/**
 * Listens for SIGTERM and SIGINT for the rest of the process's life, so
 * that no signal ever takes Deno's default action, which ends the process
 * at once: `deno task` passes each signal on to its child, which the
 * process group's signal has reached already (three arrive in a
 * millisecond), and one landing after a listener was removed ended the
 * process mid-stop, registered and with its log unwritten. The first calls
 * `first` and settles the promise; the others change nothing.
 */
function stopSignal(first: () => void): Promise<void> & { heard: boolean } {
  const { promise, resolve } = Promise.withResolvers<void>();
  const stopping = Object.assign(promise, { heard: false });
  const listener = () => {
    if (stopping.heard) return;
    stopping.heard = true;
    first();
    resolve();
  };
  Deno.addSignalListener("SIGTERM", listener);
  Deno.addSignalListener("SIGINT", listener);
  return stopping;
}

/** `host:port` of a listener, an IPv6 host in brackets as a URL has it. */
function hostPort({ hostname, port }: Deno.NetAddr): string {
  return hostname.includes(":")
    ? `[${hostname}]:${port}`
    : `${hostname}:${port}`;
}

/** One line for the operator: what failed and what to do about it. */
function startFailure(error: unknown): string {
  if (error instanceof ConfigError) return error.message;
  if (error instanceof StartArgumentsError) return error.message;
  if (error instanceof ServeUnsupportedError) return error.message;
  if (error instanceof PermissionsMissingError) return error.message;
  // Worded for the operator, naming DATABASE_URL and the fix.
  if (error instanceof StoreUnavailableError) return error.message;
  if (error instanceof StoreOpenError) return error.message;
  if (error instanceof Deno.errors.NotCapable) {
    return `The start was refused a permission the configuration did not name (${error.message}); start it with deno task start`;
  }
  if (error instanceof Deno.errors.NotFound) {
    return `A file the configuration names does not exist: ${error.message}; check TLS_CERT_FILE and TLS_KEY_FILE`;
  }
  if (error instanceof Deno.errors.AddrInUse) {
    return `The address is already in use: ${error.message}; stop the other server or set PORT (METRICS_PORT for /metrics)`;
  }
  if (error instanceof SocketPathError) {
    return `The server could not start: ${error.message}`;
  }
  return `The server could not start: ${
    error instanceof Error ? error.message : String(error)
  }`;
}
