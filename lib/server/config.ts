/**
 * The configuration, from environment variables, parsed in one place so that
 * a bad value stops the start with one line naming the variable and what it
 * accepts, before anything listens or opens the store.
 *
 * @module
 */

import { DEFAULT_KV_PATH, type StoreLocation } from "../store/location.ts";
export type { StoreLocation };
import { DEFAULT_LOCKOUT } from "../auth/lockout.ts";
import {
  parseRate,
  type RateLimit,
  RateSyntaxError,
} from "../auth/rate_limit.ts";
import {
  type Cidr,
  type CidrProblem,
  cidrProblem,
  parseCidr,
  withoutLeadingZeros,
} from "../net/ip.ts";

import { readWebhookConfig, type WebhookConfig } from "./webhook_config.ts";

const RANGE_PROBLEMS: Record<Exclude<CidrProblem, "leading_zero">, string> = {
  not_an_address: "that is no IPv4 or IPv6 address",
  prefix_malformed:
    "its prefix length after / must be a number without a leading zero",
  prefix_too_long: "its prefix length is at most 32 for IPv4 and 128 for IPv6",
  host_bits_set:
    "its host bits must be zero: write the network's first address, such as 10.0.0.0/8",
};

/** What is wrong with `text` as a range, with the range to write where one can be told. */
export function rangeProblem(text: string): string {
  const problem = cidrProblem(text) ?? "not_an_address";
  if (problem !== "leading_zero") return RANGE_PROBLEMS[problem];
  const zeroed = /(?:^|[.:])(0\d{1,2})(?=[./]|$)/.exec(text)?.[1];
  const bare = withoutLeadingZeros(text);
  return `leading zeros are not allowed, as ${
    zeroed ?? "such a number"
  } may be read as octal: write ${
    parseCidr(bare) === null ? "each number without them" : bare
  }`;
}

export interface Config {
  port: number;
  hostname: string;
  /** SO_REUSEPORT (Linux): the kernel spreads connections over the processes. */
  reusePort: boolean;
  /** A Unix socket for a proxy on the same host, instead of HOST:PORT. */
  socketPath: string | null;
  store: StoreLocation;
  /** Whose X-Forwarded-For is believed; empty: the client is the TCP peer. */
  trustedProxies: Cidr[];
  lockout: { maxFailures: number; windowSeconds: number; lockSeconds: number };
  /** PEM files, when the server speaks HTTPS itself. */
  tls: { certFile: string; keyFile: string } | null;
  connections: {
    headerTimeoutSeconds: number;
    idleTimeoutSeconds: number;
    maxConnections: number;
  };
  /** Where `/metrics` is served, on its own listener; null: not at all. */
  metrics: { hostname: string; port: number } | null;
  /** What a reported leak of a valid key does to it (POST /api/v1/keys/leaked). */
  leakedKeyAction: "revoke" | "notify";
  webhooks: WebhookConfig;
}

/** A bad configuration value; its message is meant for the operator as is. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

export type EnvReader = (name: string) => string | undefined;

export interface ReadOptions {
  /** Asked only to word a conflict: a variable set in `.env` is easily forgotten. */
  envFileNames?: () => ReadonlySet<string>;
}

/** The names `.env` defines; empty when unreadable (the tasks grant it only for a wrong config). */
export function envFileNames(
  options: { path?: string } = {},
): ReadonlySet<string> {
  let text: string;
  try {
    text = Deno.readTextFileSync(options.path ?? ".env");
  } catch {
    return new Set();
  }
  const names = new Set<string>();
  for (const line of text.split(/\r?\n/)) {
    const name = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=/.exec(line)
      ?.[1];
    if (name !== undefined) names.add(name);
  }
  return names;
}

/** The store location alone, for the console: PostgreSQL when `DATABASE_URL` is set, else Deno KV. */
export function readStoreLocation(
  env: EnvReader,
  options: ReadOptions = {},
): StoreLocation {
  const url = nonEmpty(env, "DATABASE_URL");
  if (url !== undefined) {
    if (nonEmpty(env, "DENO_KV_PATH") !== undefined) {
      // Either alone is clear; both would leave keys where nobody looks.
      throw new ConfigError(bothStores(options.envFileNames?.() ?? new Set()));
    }
    return { kind: "postgres", url: postgresUrl(url) };
  }
  const path = nonEmpty(env, "DENO_KV_PATH") ?? DEFAULT_KV_PATH;
  if (!isKvPath(path)) {
    throw new ConfigError(
      `DENO_KV_PATH must be a file path, ":memory:" or a URL, not ${
        JSON.stringify(path)
      }`,
    );
  }
  return { kind: "kv", path };
}

/** Names which comes from `.env`: with one in the shell, "unset one" alone finds nothing. */
function bothStores(inFile: ReadonlySet<string>): string {
  const both = "DATABASE_URL and DENO_KV_PATH";
  const reason = "as the keys live in one store";
  const fromFile = ["DATABASE_URL", "DENO_KV_PATH"].filter((n) =>
    inFile.has(n)
  );
  if (fromFile.length === 2) {
    return `${both} are both set in .env; remove one from .env, ${reason}`;
  }
  if (fromFile.length === 1) {
    const [file] = fromFile;
    const shell = file === "DATABASE_URL" ? "DENO_KV_PATH" : "DATABASE_URL";
    return `${shell} is set in the environment and ${file} in .env, which the tasks read too; remove ${file} from .env, or unset ${shell}, ${reason}`;
  }
  return `${both} are both set in the environment (not in .env); unset one, ${reason}`;
}

const DURATION_UNITS: Record<string, number> = {
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/** A duration such as 60s, 15m, 2h or 7d, in milliseconds; null when the text is not one. */
export function parseDuration(text: string): number | null {
  const match = /^([1-9]\d{0,8})([smhd])$/.exec(text.trim());
  return match === null ? null : Number(match[1]) * DURATION_UNITS[match[2]];
}

/** `KEY_MAX_LIFETIME` in milliseconds, for the console; null when unset. */
export function readKeyMaxLifetime(env: EnvReader): number | null {
  const raw = nonEmpty(env, "KEY_MAX_LIFETIME");
  if (raw === undefined) return null;
  const ms = parseDuration(raw);
  if (ms === null) {
    throw new ConfigError(
      `KEY_MAX_LIFETIME must be a duration such as 90d, 12h or 30m, not ${
        JSON.stringify(raw)
      }`,
    );
  }
  // Every new key's expiry is now + this: it must be a time a date can hold.
  if (Number.isNaN(new Date(Date.now() + ms).getTime())) {
    throw new ConfigError(
      `KEY_MAX_LIFETIME ${
        JSON.stringify(raw)
      } reaches past the last time a date can hold; give a shorter duration such as 90d`,
    );
  }
  return ms;
}

/** `KEY_RATE_LIMIT`, for the console; null when unset or `none`. */
export function readKeyRateLimit(env: EnvReader): RateLimit | null {
  const raw = nonEmpty(env, "KEY_RATE_LIMIT");
  if (raw === undefined) return null;
  try {
    return parseRate(raw);
  } catch (error) {
    if (!(error instanceof RateSyntaxError)) throw error;
    throw new ConfigError(`KEY_RATE_LIMIT: ${error.message}`);
  }
}

/** Each whole-number variable with its default and range, once. */
export const WHOLE_NUMBERS = {
  PORT: { default: 8000, min: 0, max: 65535 },
  LOCKOUT_MAX_FAILURES: {
    default: DEFAULT_LOCKOUT.maxFailures,
    min: 1,
    max: 1_000_000_000,
  },
  LOCKOUT_WINDOW_SECONDS: {
    default: DEFAULT_LOCKOUT.windowSeconds,
    min: 1,
    max: 86_400,
  },
  LOCKOUT_SECONDS: {
    default: DEFAULT_LOCKOUT.lockSeconds,
    min: 1,
    max: 86_400,
  },
  HEADER_TIMEOUT_SECONDS: { default: 10, min: 1, max: 3_600 },
  IDLE_TIMEOUT_SECONDS: { default: 30, min: 1, max: 3_600 },
  MAX_CONNECTIONS: { default: 900, min: 1, max: 1_000_000 },
  REUSE_PORT: { default: 0, min: 0, max: 1 },
  METRICS_PORT: { default: 0, min: 0, max: 65_535 },
} as const;

export function readConfig(env: EnvReader, options: ReadOptions = {}): Config {
  const whole = (name: keyof typeof WHOLE_NUMBERS) =>
    integer(env, name, WHOLE_NUMBERS[name]);
  const config: Config = {
    port: whole("PORT"),
    hostname: hostname(env, "HOST", "0.0.0.0"),
    reusePort: whole("REUSE_PORT") === 1,
    socketPath: socketPath(env),
    store: readStoreLocation(env, options),
    trustedProxies: trustedProxies(env),
    lockout: {
      maxFailures: whole("LOCKOUT_MAX_FAILURES"),
      windowSeconds: whole("LOCKOUT_WINDOW_SECONDS"),
      lockSeconds: whole("LOCKOUT_SECONDS"),
    },
    tls: tlsFiles(env),
    connections: {
      headerTimeoutSeconds: whole("HEADER_TIMEOUT_SECONDS"),
      idleTimeoutSeconds: whole("IDLE_TIMEOUT_SECONDS"),
      maxConnections: whole("MAX_CONNECTIONS"),
    },
    // Its own listener, on loopback unless told: metrics never share the
    // integrators' port.
    metrics: nonEmpty(env, "METRICS_PORT") === undefined ? null : {
      hostname: hostname(env, "METRICS_HOST", "127.0.0.1"),
      port: whole("METRICS_PORT"),
    },
    leakedKeyAction: leakedKeyAction(env),
    webhooks: webhookConfig(env),
  };
  const { windowSeconds, lockSeconds } = config.lockout;
  // A lock ending inside the window would let one more 401 through each time.
  if (lockSeconds < windowSeconds) {
    throw new ConfigError(
      `LOCKOUT_SECONDS (${lockSeconds}) is shorter than LOCKOUT_WINDOW_SECONDS (${windowSeconds}), so each lock's end would let one more 401 through; set LOCKOUT_SECONDS to ${windowSeconds} or more`,
    );
  }
  if (config.socketPath !== null && config.tls !== null) {
    throw new ConfigError(
      "SOCKET_PATH and TLS_CERT_FILE are both set; behind nginx on a socket, nginx ends TLS: unset TLS_CERT_FILE and TLS_KEY_FILE",
    );
  }
  const { metrics } = config;
  // Else the start would fail on the bind, after /metrics took the
  // integrators' address and the server had registered.
  if (
    metrics !== null && config.socketPath === null && metrics.port !== 0 &&
    metrics.port === config.port &&
    (metrics.hostname === config.hostname ||
      [metrics.hostname, config.hostname].some((h) => WILDCARDS.has(h)))
  ) {
    throw new ConfigError(
      `METRICS_PORT is PORT (${config.port}) on an address both would listen on; /metrics never shares the integrators' port: set METRICS_PORT to a port of its own, such as 9464`,
    );
  }
  if (config.socketPath !== null && config.reusePort) {
    throw new ConfigError(
      "SOCKET_PATH and REUSE_PORT=1 are both set; a socket belongs to one server: give each its own SOCKET_PATH and list them all in nginx's upstream",
    );
  }
  return config;
}

function webhookConfig(env: EnvReader): WebhookConfig {
  const read = readWebhookConfig(env);
  if (typeof read === "string") throw new ConfigError(read);
  return read;
}

function leakedKeyAction(env: EnvReader): Config["leakedKeyAction"] {
  const value = nonEmpty(env, "LEAKED_KEY_ACTION") ?? "revoke";
  if (value === "revoke" || value === "notify") return value;
  throw new ConfigError(
    `LEAKED_KEY_ACTION must be revoke or notify, not ${JSON.stringify(value)}`,
  );
}

function trustedProxies(env: EnvReader): Cidr[] {
  const raw = nonEmpty(env, "TRUSTED_PROXIES");
  if (raw === undefined) return [];
  return raw.split(",").map((item) => {
    const cidr = parseCidr(item.trim());
    if (cidr === null) {
      throw new ConfigError(
        `TRUSTED_PROXIES must list addresses or CIDR ranges such as 10.0.0.5/32,fd00::/64, separated by commas; ${
          JSON.stringify(item.trim())
        } is not one (${rangeProblem(item.trim())})`,
      );
    }
    return cidr;
  });
}

/** Linux's sun_path: 108 bytes, NUL included. */
const SOCKET_PATH_MAX = 107;

function socketPath(env: EnvReader): string | null {
  const raw = nonEmpty(env, "SOCKET_PATH");
  if (raw === undefined) return null;
  if (
    !raw.startsWith("/") || raw.endsWith("/") || raw.includes("\0") ||
    new TextEncoder().encode(raw).length > SOCKET_PATH_MAX
  ) {
    throw new ConfigError(
      `SOCKET_PATH must be an absolute file path of at most ${SOCKET_PATH_MAX} bytes, such as /run/integration/service.sock, not ${
        JSON.stringify(raw)
      }`,
    );
  }
  return raw;
}

function tlsFiles(env: EnvReader): Config["tls"] {
  const certFile = nonEmpty(env, "TLS_CERT_FILE");
  const keyFile = nonEmpty(env, "TLS_KEY_FILE");
  if (certFile === undefined && keyFile === undefined) return null;
  if (certFile === undefined || keyFile === undefined) {
    throw new ConfigError(
      `TLS_CERT_FILE and TLS_KEY_FILE must be set together; ${
        certFile === undefined ? "TLS_CERT_FILE" : "TLS_KEY_FILE"
      } is missing`,
    );
  }
  return { certFile, keyFile };
}

/** Reads the process environment; a variable the process may not read counts as unset. */
export function processEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch (error) {
    if (error instanceof Deno.errors.NotCapable) return undefined;
    throw error;
  }
}

function nonEmpty(env: EnvReader, name: string): string | undefined {
  const value = env(name);
  return value === undefined || value.trim() === "" ? undefined : value.trim();
}

function integer(
  env: EnvReader,
  name: string,
  rule: { default: number; min: number; max: number },
): number {
  const raw = nonEmpty(env, name);
  if (raw === undefined) return rule.default;
  const value = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(value) || value < rule.min || value > rule.max) {
    throw new ConfigError(
      `${name} must be a whole number from ${rule.min} to ${rule.max}, not ${
        JSON.stringify(raw)
      }`,
    );
  }
  return value;
}

/** Addresses that listen on every interface, so on any address of the same port. */
const WILDCARDS = new Set(["0.0.0.0", "::", ""]);

function hostname(env: EnvReader, name: string, fallback: string): string {
  const raw = nonEmpty(env, name);
  if (raw === undefined) return fallback;
  // An IPv4 or IPv6 literal, or a DNS name: nothing with a scheme, port or path.
  if (!/^(?:[A-Za-z0-9.-]+|\[?[0-9A-Fa-f:.]+\]?)$/.test(raw)) {
    throw new ConfigError(
      `${name} must be an IP address or host name such as 0.0.0.0 or 127.0.0.1, not ${
        JSON.stringify(raw)
      }`,
    );
  }
  return raw.replace(/^\[(.*)\]$/, "$1");
}

const SSL_MODES = ["disable", "allow", "prefer", "require", "verify-full"];

/** Checks a PostgreSQL URL; the message never repeats it, as it may hold a password. */
function postgresUrl(raw: string): string {
  const fail = (problem: string): never => {
    throw new ConfigError(
      `DATABASE_URL must be a URL such as postgres://USER:PASSWORD@HOST:5432/DATABASE, but ${problem}`,
    );
  };
  if (!URL.canParse(raw)) fail("the value is not a URL");
  const url = new URL(raw);
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    fail(`its scheme is ${url.protocol} instead of postgres: or postgresql:`);
  }
  if (url.hostname === "") fail("it names no host");
  if (url.username === "") fail("it names no user");
  const sslmode = url.searchParams.get("sslmode");
  if (sslmode !== null && !SSL_MODES.includes(sslmode)) {
    fail(`its sslmode is not one of ${SSL_MODES.join(", ")}`);
  }
  return raw;
}

function isKvPath(path: string): boolean {
  if (path === ":memory:") return true;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(path)) {
    return URL.canParse(path) && /^https?:$/.test(new URL(path).protocol);
  }
  // A file path: not a folder, and no NUL byte that the OS would cut at.
  return !path.endsWith("/") && !path.includes("\0");
}
