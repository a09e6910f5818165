/**
 * The Deno permissions a configuration needs, derived from it: the tasks,
 * the Docker image and the compiled binary get exactly these, so the store
 * and TLS files may be anywhere while the process touches nothing else.
 * Each grant names the setting that asked for it, for a refusal to name.
 *
 * @module
 */

import type { Config, StoreLocation } from "./config.ts";
import { ConfigError } from "./config.ts";

/** One permission, and the setting (a variable or an argument) that needs it. */
export interface Grant {
  kind: "net" | "read" | "write" | "env" | "sys";
  /** As Deno's flags take it. */
  value: string;
  by: string;
}

/** The variables the server reads: each is granted, so that each can be refused with a reason. */
export const SERVER_VARIABLES = [
  "PORT",
  "HOST",
  "DENO_KV_PATH",
  "DATABASE_URL",
  "TRUSTED_PROXIES",
  "LOCKOUT_MAX_FAILURES",
  "LOCKOUT_WINDOW_SECONDS",
  "LOCKOUT_SECONDS",
  "TLS_CERT_FILE",
  "TLS_KEY_FILE",
  "HEADER_TIMEOUT_SECONDS",
  "IDLE_TIMEOUT_SECONDS",
  "MAX_CONNECTIONS",
  "REUSE_PORT",
  "SOCKET_PATH",
  "METRICS_PORT",
  "METRICS_HOST",
  "LEAKED_KEY_ACTION",
  "WEBHOOK_HOSTS",
  "WEBHOOK_RETRY_SECONDS",
  "WEBHOOK_EXPIRING_DAYS",
] as const;

/** The variables the console reads: the store's, and who is acting (for the audit log). */
export const CONSOLE_VARIABLES = [
  "DENO_KV_PATH",
  "DATABASE_URL",
  "USER",
  "LOGNAME",
  "NO_COLOR",
  "KEY_MAX_LIFETIME",
  "KEY_RATE_LIMIT",
] as const;

/** What the server needs. */
export function serverGrants(config: Config): Grant[] {
  const grants: Grant[] = [
    ...SERVER_VARIABLES.map((name) => env(name)),
    // A socket is listened on as `unix:PATH` and its file checked and
    // removed when stale: that one path, and no address on the network.
    ...(config.socketPath === null
      ? [{
        kind: "net" as const,
        value: hostPort(config.hostname, config.port),
        by: "HOST and PORT",
      }]
      : [
        {
          kind: "net" as const,
          value: `unix:${config.socketPath}`,
          by: "SOCKET_PATH",
        },
        { kind: "read" as const, value: config.socketPath, by: "SOCKET_PATH" },
        { kind: "write" as const, value: config.socketPath, by: "SOCKET_PATH" },
      ]),
    ...storeGrants(config.store),
    { kind: "sys", value: "hostname", by: "keys status" },
  ];
  if (config.metrics !== null) {
    grants.push({
      kind: "net",
      value: hostPort(config.metrics.hostname, config.metrics.port),
      by: "METRICS_HOST and METRICS_PORT",
    });
  }
  for (const host of config.webhooks.hosts) {
    grants.push({ kind: "net", value: host, by: "WEBHOOK_HOSTS" });
  }
  if (config.tls) {
    grants.push(
      { kind: "read", value: config.tls.certFile, by: "TLS_CERT_FILE" },
      { kind: "read", value: config.tls.keyFile, by: "TLS_KEY_FILE" },
    );
  }
  return checked(grants);
}

/** What the console needs, with the files its command line names. */
export function consoleGrants(
  store: StoreLocation,
  options: { read?: string[]; write?: string[] } = {},
): Grant[] {
  const grants: Grant[] = [
    ...CONSOLE_VARIABLES.map((name) => env(name)),
    { kind: "sys", value: "hostname", by: "the audit log" },
    { kind: "sys", value: "uid", by: "the audit log" },
    ...storeGrants(store),
  ];
  for (const file of options.read ?? []) {
    grants.push({ kind: "read", value: file, by: "FILE" });
  }
  for (const file of options.write ?? []) {
    // An export writes a temporary file beside FILE and links it into place.
    grants.push(
      { kind: "read", value: folderOf(file), by: "FILE" },
      { kind: "write", value: folderOf(file), by: "FILE" },
    );
  }
  return checked(grants);
}

function storeGrants(store: StoreLocation): Grant[] {
  if (store.kind === "postgres") {
    const url = new URL(store.url);
    return [
      {
        kind: "net",
        value: hostPort(url.hostname, Number(url.port || 5432)),
        by: "DATABASE_URL",
      },
      // The driver reads it for the connection's name in pg_stat_activity.
      env("PGAPPNAME"),
    ];
  }
  if (store.path === ":memory:") return [];
  if (/^https?:\/\//i.test(store.path)) {
    const url = new URL(store.path);
    const port = url.port || (url.protocol === "https:" ? "443" : "80");
    return [
      {
        kind: "net",
        value: hostPort(url.hostname, Number(port)),
        by: "DENO_KV_PATH",
      },
      // Deno reads the token itself when it connects to a remote KV.
      env("DENO_KV_ACCESS_TOKEN", "DENO_KV_PATH"),
    ];
  }
  // SQLite keeps -wal and -shm beside the file, and the store creates the
  // folder when it is missing: the folder is what it needs.
  const folder = folderOf(store.path);
  return [
    { kind: "read", value: folder, by: "DENO_KV_PATH" },
    { kind: "write", value: folder, by: "DENO_KV_PATH" },
  ];
}

function env(name: string, by = name): Grant {
  return { kind: "env", value: name, by };
}

/** Granted only when the configuration is wrong, for the message to say what comes from `.env`. */
export const ENV_FILE_GRANT: Grant = {
  kind: "read",
  value: ".env",
  by: "the message about .env",
};

export function variableGrants(names: readonly string[]): Grant[] {
  return names.map((name) => env(name));
}

/** `host:port` as Deno's --allow-net takes it, IPv6 in brackets. */
function hostPort(hostname: string, port: number): string {
  const host = hostname.replace(/^\[(.*)\]$/, "$1");
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

export function folderOf(path: string): string {
  const slash = path.lastIndexOf("/");
  if (slash < 0) return ".";
  return slash === 0 ? "/" : path.slice(0, slash);
}

/**
 * A comma cannot be granted (Deno's flags list with them), and a host Deno's
 * parser refuses (`a..b`, `[::1`, `%`) would stop `deno run` with a stack trace.
 */
function checked(grants: Grant[]): Grant[] {
  for (const grant of grants) {
    if (grant.value.includes(",")) {
      throw new ConfigError(
        `${grant.by} names ${
          JSON.stringify(grant.value)
        }, and Deno's permission flags cannot name a path or host with a comma; use one without`,
      );
    }
    if (grant.kind === "net" && !grantableHost(grant.value)) {
      throw new ConfigError(
        `${grant.by} ${grant.by.includes(" and ") ? "give" : "gives"} ${
          JSON.stringify(grant.value)
        }, which is not a host and port Deno can grant access to; use an IP address or a host name such as 127.0.0.1 or db.example.com`,
      );
    }
  }
  return grants;
}

/** Whether Deno's --allow-net takes `hostPort`: querying it parses it as the flag would. */
function grantableHost(hostPort: string): boolean {
  try {
    Deno.permissions.querySync({ name: "net", host: hostPort });
    return true;
  } catch {
    return false;
  }
}

const FLAG_ORDER: Grant["kind"][] = ["net", "read", "write", "env", "sys"];

/** The grants as `--allow-…` flags, one per kind, each value once. */
export function permissionFlags(grants: Grant[]): string[] {
  return FLAG_ORDER.flatMap((kind) => {
    const values = [
      ...new Set(grants.filter((g) => g.kind === kind).map((g) => g.value)),
    ];
    return values.length === 0 ? [] : [`--allow-${kind}=${values.join(",")}`];
  });
}

function missingGrants(grants: Grant[]): Grant[] {
  return grants.filter((grant) =>
    Deno.permissions.querySync(
      {
        name: grant.kind,
        [DESCRIPTOR_FIELD[grant.kind]]: grant.value,
      } as Deno.PermissionDescriptor,
    ).state !== "granted"
  );
}

const DESCRIPTOR_FIELD = {
  net: "host",
  read: "path",
  write: "path",
  env: "variable",
  sys: "kind",
} as const;

/** A permission the configuration needs and the process lacks; its message is for the operator as is. */
export class PermissionsMissingError extends Error {
  override name = "PermissionsMissingError";
  readonly missing: Grant[];

  constructor(message: string, missing: Grant[]) {
    super(message);
    this.missing = missing;
  }
}

/**
 * Throws {@linkcode PermissionsMissingError} naming who asks and a command that
 * grants it: `task`, a `deno run` line for a path tasks cannot pass, or compile.
 */
export function requireGrants(
  grants: Grant[],
  options: {
    task: string;
    entrypoint: string;
    runFlags?: string[];
    /** The task passes any path, spaces included (the keys launcher does). */
    anyPath?: boolean;
  },
): void {
  const missing = missingGrants(grants);
  if (missing.length === 0) return;
  const needs = missing.map(describe).join("; ");
  // What an operator can change: the sys calls of the audit log are no setting.
  const settings = [
    ...new Set(missing.filter((g) => g.kind !== "sys").map((g) => g.by)),
  ].join(", ");
  const orChange = settings === "" ? "" : `, or change ${settings}`;
  let fix: string;
  if (Deno.build.standalone) {
    fix =
      `this binary was compiled for another configuration: compile it again with ${settings} set as they are now (deno task compile), or change ${settings} back`;
  } else if (!options.anyPath && missing.some((g) => /[\s*?]/.test(g.value))) {
    fix =
      `deno task ${options.task} cannot pass a path with spaces, * or ? to Deno, so run: ${
        shellCommand([
          "deno",
          "run",
          ...(options.runFlags ?? []),
          ...permissionFlags(grants),
          options.entrypoint,
        ])
      } (or move it to a path without spaces)`;
  } else {
    fix =
      `start it with deno task ${options.task}, which grants what the configuration needs${orChange}`;
  }
  throw new PermissionsMissingError(
    `The configuration needs permissions this process lacks: ${needs}; ${fix}`,
    missing,
  );
}

function describe(grant: Grant): string {
  const what = {
    net: "network access to",
    read: "read access to",
    write: "write access to",
    env: "the variable",
    sys: "the system information",
  }[grant.kind];
  return grant.by === grant.value
    ? `${what} ${grant.value}`
    : `${what} ${grant.value} (for ${grant.by})`;
}

/** Words as one POSIX shell command line, quoted where a shell would split or expand them. */
function shellCommand(words: string[]): string {
  return words.map((word) =>
    /^[\w@%+=:,./[\]-]+$/.test(word)
      ? word
      : `'${word.replaceAll("'", `'\\''`)}'`
  ).join(" ");
}
