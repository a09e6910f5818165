/**
 * The server's command line: no arguments, as every setting is an
 * environment variable, but `--help` (`-h`) and `--version`.
 *
 * @module
 */

import { WHOLE_NUMBERS } from "./config.ts";
import { SERVER_VARIABLES } from "./permissions.ts";

const DOCS = "docs/operators.md#configuration";

export type StartRequest = "serve" | "help" | "version";

/** An argument the server does not take; exit code 2, as for a usage error. */
export class StartArgumentsError extends Error {
  override name = "StartArgumentsError";
  readonly code = "arguments_refused";
  readonly exitCode = 2;
  constructor() {
    super(
      `The server takes no arguments; configure it with environment variables (PORT, HOST, DENO_KV_PATH, DATABASE_URL, …), see ${DOCS} or run it with --help`,
    );
  }
}

/** What `args` asks for; anything else throws, never repeating the arguments. */
export function readStartArguments(args: readonly string[]): StartRequest {
  if (args.length === 0) return "serve";
  if (args.length === 1 && (args[0] === "--help" || args[0] === "-h")) {
    return "help";
  }
  if (args.length === 1 && args[0] === "--version") return "version";
  throw new StartArgumentsError();
}

const MEANINGS: Record<(typeof SERVER_VARIABLES)[number], string> = {
  PORT: "port to listen on, 0 for any free port",
  HOST: "address to listen on (default 0.0.0.0; :: for dual-stack)",
  DENO_KV_PATH: "the Deno KV store (default ./data/keys.db)",
  DATABASE_URL: "postgres://USER@HOST:PORT/DB: use PostgreSQL instead",
  TRUSTED_PROXIES: "proxies whose X-Forwarded-For is read (CIDR ranges)",
  LOCKOUT_MAX_FAILURES: "failed authentications that lock a client",
  LOCKOUT_WINDOW_SECONDS: "the window those failures are counted in",
  LOCKOUT_SECONDS: "how long a lock lasts",
  TLS_CERT_FILE: "PEM certificate, with TLS_KEY_FILE: serve HTTPS",
  TLS_KEY_FILE: "PEM private key, with TLS_CERT_FILE",
  HEADER_TIMEOUT_SECONDS: "time a connection has to send a request head",
  IDLE_TIMEOUT_SECONDS: "idle time after which a connection is closed",
  MAX_CONNECTIONS:
    "open connections before the heaviest address gives up its first accepted",
  REUSE_PORT: "1 to share HOST:PORT with other server processes",
  SOCKET_PATH: "listen on this Unix socket instead of HOST:PORT",
  METRICS_PORT: "serve Prometheus /metrics on this port (unset: off)",
  METRICS_HOST: "the address /metrics listens on (default 127.0.0.1)",
  LEAKED_KEY_ACTION: "revoke or notify: what a reported leaked key gets",
  WEBHOOK_HOSTS:
    "hosts webhook deliveries may reach (host or host:port, by commas)",
  WEBHOOK_RETRY_SECONDS: "a failed delivery's first retry delay (default 5)",
  WEBHOOK_EXPIRING_DAYS:
    "days before expiry to send key.expiring (default 14,1)",
};

/** The `--help` text: one line per variable, with its default and range. */
export function startHelp(): string {
  const width = Math.max(...SERVER_VARIABLES.map((name) => name.length));
  const lines = SERVER_VARIABLES.map((name) => {
    const rule = (WHOLE_NUMBERS as Record<
      string,
      { default: number; min: number; max: number } | undefined
    >)[name];
    const range = rule === undefined
      ? ""
      : ` (${rule.min} to ${rule.max}; default ${rule.default})`;
    return `  ${name.padEnd(width)}  ${MEANINGS[name]}${range}`;
  });
  return [
    "Usage: deno task start",
    "       deno task start --version   (prints the release and exits)",
    "",
    "The server takes no arguments. It reads these environment variables,",
    "and a .env file in the working folder:",
    "",
    ...lines,
    "",
    `Every variable is described in ${DOCS}`,
  ].join("\n");
}
