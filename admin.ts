/**
 * The admin console, run as `deno task keys`: a thin shell over the same
 * {@linkcode KeyStore} the server reads.
 *
 * Exit codes: 0 done, 1 the command failed (unknown key, name taken, store
 * unavailable), 2 the command line was wrong. With `--json`, stdout carries
 * exactly one JSON value; every message goes to stderr.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { generateApiKey } from "./lib/api_key.ts";
import { ConfigError, processEnv, readStoreLocation } from "./lib/config.ts";
import {
  type AuditEntry,
  keyNotFound,
  type KeyRecord,
  type KeyStore,
  normalizeEmail,
  normalizeName,
  openStore,
  publicRecord,
  StoreInputError,
} from "./lib/store.ts";
import { type Column, headingLine, rowLine } from "./lib/_table.ts";

/** A wrong command line: exit code 2. */
class UsageError extends Error {}

interface OptionSpec {
  type: "string" | "boolean";
  help: string;
}

interface Command {
  summary: string;
  usage: string;
  options: Record<string, OptionSpec>;
  positionals: [min: number, max: number, name?: string];
  run(ctx: Context): Promise<void>;
}

interface Context {
  store: KeyStore;
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
  json: boolean;
  out: Output;
  actor: string;
}

const JSON_OPTION: OptionSpec = {
  type: "boolean",
  help: "print exactly one JSON value on stdout",
};

const STORE_WARNING = [
  "This key is shown once and cannot be recovered: only its hash is stored.",
  "Give it to the integrator now, to keep in a secrets manager, an environment variable or an encrypted configuration file;",
  "never in source control, a URL or a log line. If it is lost, rotate it.",
].join("\n");

const COMMANDS: Record<string, Command> = {
  create: {
    summary: "generate a key for an installation and print it once",
    usage: "create --name NAME --email EMAIL",
    options: {
      name: {
        type: "string",
        help: "the installation's name, unique among valid keys",
      },
      email: {
        type: "string",
        help: "the integrator's registered e-mail address",
      },
    },
    positionals: [0, 0],
    async run({ store, values, json, out, actor }) {
      const name = required(values, "name");
      const email = required(values, "email");
      // Bad input is a usage error (exit 2), caught before the store is touched.
      try {
        normalizeName(name);
        normalizeEmail(email);
      } catch (error) {
        throw new UsageError(
          `--${
            error instanceof Error && error.message.startsWith("Email")
              ? "email"
              : "name"
          }: ${error instanceof Error ? error.message : error}`,
        );
      }
      const fresh = generateApiKey();
      const record = await store.create({
        name,
        email,
        hash: fresh.hash,
        hint: fresh.hint,
      }, { actor });
      out.line(
        json
          ? JSON.stringify({ ...publicRecord(record), key: fresh.key })
          : fresh.key,
      );
      console.error(
        `Created key ${record.id} "${record.name}" for ${record.email}.\n${STORE_WARNING}`,
      );
    },
  },
  list: {
    summary: "list valid keys, or with --all revoked ones too",
    usage: "list [--all]",
    options: {
      all: { type: "boolean", help: "include revoked keys, with when and why" },
    },
    positionals: [0, 0],
    async run({ store, values, json, out }) {
      const all = values.all === true;
      const records = store.list({ includeRevoked: all });
      if (json) {
        out.write("[");
        let first = true;
        for await (const record of records) {
          out.write((first ? "" : ",") + JSON.stringify(publicRecord(record)));
          first = false;
        }
        out.line("]");
        return;
      }
      const columns = all
        ? [...LIST_COLUMNS, ...REVOKED_COLUMNS]
        : LIST_COLUMNS;
      out.line(headingLine(columns));
      let count = 0;
      const exposed: number[] = [];
      for await (const record of records) {
        out.line(rowLine(columns, record));
        count++;
        if (record.exposedAt !== null && record.status === "valid") {
          exposed.push(record.id);
        }
      }
      console.error(
        `${count} ${all ? "" : "valid "}key${count === 1 ? "" : "s"}`,
      );
      if (exposed.length > 0) {
        console.error(
          `Sent in a URL, where proxies and logs may keep them: ${
            exposed.join(", ")
          }; rotate each with "keys rotate KEY"`,
        );
      }
    },
  },
  show: {
    summary: "show one key",
    usage: "show KEY",
    options: {},
    positionals: [1, 1, "KEY (an id or a name)"],
    async run({ store, positionals, json, out }) {
      printRecord(out, json, await resolve(store, positionals[0]));
    },
  },
  revoke: {
    summary: "revoke a key at once and for good",
    usage: "revoke KEY [--reason TEXT]",
    options: {
      reason: {
        type: "string",
        help: "why: lost, leaked, decommissioned, person left",
      },
    },
    positionals: [1, 1, "KEY (an id or a name)"],
    async run({ store, values, positionals, json, out, actor }) {
      const target = await resolve(store, positionals[0]);
      const reason = typeof values.reason === "string"
        ? values.reason
        : undefined;
      const { record, changed } = await store.revoke(target.id, {
        actor,
        reason,
      });
      console.error(
        changed
          ? `Revoked key ${record.id} "${record.name}": the next request with it gets 401.`
          : `Key ${record.id} "${record.name}" was already revoked at ${record.revokedAt}; nothing changed.`,
      );
      printRecord(out, json, record);
    },
  },
  rotate: {
    summary: "revoke a key and generate its replacement in one step",
    usage: "rotate KEY",
    options: {},
    positionals: [1, 1, "KEY (an id or a name)"],
    async run({ store, positionals, json, out, actor }) {
      const target = await resolve(store, positionals[0]);
      const fresh = generateApiKey();
      const { revoked, created } = await store.rotate(target.id, fresh, {
        actor,
      });
      out.line(
        json
          ? JSON.stringify({
            ...publicRecord(created),
            key: fresh.key,
            replaces: publicRecord(revoked),
          })
          : fresh.key,
      );
      console.error(
        `Revoked key ${revoked.id} and created key ${created.id} "${created.name}" for ${created.email}.\n${STORE_WARNING}`,
      );
    },
  },
  audit: {
    summary: "show the audit log, oldest first",
    usage: "audit [KEY]",
    options: {},
    positionals: [0, 1, "KEY (an id or a name)"],
    async run({ store, positionals, json, out }) {
      const keyId = positionals[0] === undefined
        ? undefined
        : (await resolve(store, positionals[0])).id;
      const entries = store.audit({ keyId });
      if (json) {
        const all: AuditEntry[] = [];
        for await (const entry of entries) all.push(entry);
        out.line(JSON.stringify(all));
        return;
      }
      out.line(headingLine(AUDIT_COLUMNS));
      for await (const entry of entries) {
        out.line(rowLine(AUDIT_COLUMNS, entry));
      }
    },
  },
};

const LIST_COLUMNS: Column<KeyRecord>[] = [
  { heading: "ID", width: 6, cell: (r) => String(r.id) },
  { heading: "NAME", width: 24, cell: (r) => r.name },
  { heading: "EMAIL", width: 28, cell: (r) => r.email },
  { heading: "STATUS", width: 7, cell: (r) => r.status },
  { heading: "CREATED", width: 20, cell: (r) => shortTime(r.createdAt) },
  { heading: "HINT", width: 10, cell: (r) => r.hint },
  {
    heading: "EXPOSED IN A URL",
    width: 48,
    cell: (r) =>
      r.exposedAt === null
        ? ""
        : `${shortTime(r.exposedAt)} from ${r.exposedFrom}`,
  },
];

const REVOKED_COLUMNS: Column<KeyRecord>[] = [
  { heading: "REVOKED", width: 20, cell: (r) => shortTime(r.revokedAt) },
  { heading: "REASON", width: 32, cell: (r) => r.revokedReason ?? "" },
];

const AUDIT_COLUMNS: Column<AuditEntry>[] = [
  { heading: "AT", width: 20, cell: (e) => shortTime(e.at) },
  { heading: "ACTION", width: 8, cell: (e) => e.action },
  { heading: "KEY", width: 6, cell: (e) => String(e.keyId) },
  { heading: "BY", width: 28, cell: (e) => e.actor },
  { heading: "DETAIL", width: 40, cell: (e) => e.detail ?? "" },
];

function shortTime(iso: string | null): string {
  return iso === null ? "" : iso.slice(0, 19).replace("T", " ") + "Z";
}

function printRecord(out: Output, json: boolean, record: KeyRecord): void {
  if (json) {
    out.line(JSON.stringify(publicRecord(record)));
    return;
  }
  for (const [field, value] of Object.entries(publicRecord(record))) {
    out.line(`${field.padEnd(14)}${value ?? ""}`);
  }
}

/** A key by id (all digits) or by name (valid keys only). */
async function resolve(store: KeyStore, ref: string): Promise<KeyRecord> {
  const record = /^\d+$/.test(ref)
    ? await store.get(Number(ref))
    : await store.getByName(ref);
  if (record === null) {
    throw keyNotFound(/^\d+$/.test(ref) ? Number(ref) : ref);
  }
  return record;
}

function required(
  values: Context["values"],
  option: string,
): string {
  const value = values[option];
  if (typeof value !== "string" || value.trim() === "") {
    throw new UsageError(`--${option} is required`);
  }
  return value;
}

/** Buffered stdout, so that a listing of 100 000 keys is not 100 000 writes. */
class Output {
  #chunks: string[] = [];
  #size = 0;
  #encoder = new TextEncoder();

  write(text: string): void {
    this.#chunks.push(text);
    this.#size += text.length;
    if (this.#size > 64 * 1024) this.flush();
  }

  line(text: string): void {
    this.write(text + "\n");
  }

  flush(): void {
    const bytes = this.#encoder.encode(this.#chunks.join(""));
    this.#chunks = [];
    this.#size = 0;
    for (let at = 0; at < bytes.length;) {
      at += Deno.stdout.writeSync(bytes.subarray(at));
    }
  }
}

function mainHelp(): string {
  const width = Math.max(...Object.values(COMMANDS).map((c) => c.usage.length));
  return [
    "Manage the API keys of the integration service.",
    "",
    "Usage: deno task keys <command> [options]",
    "",
    "Commands:",
    ...Object.values(COMMANDS).map((c) =>
      `  ${c.usage.padEnd(width)}  ${c.summary}`
    ),
    "",
    "KEY is a key id or the name of a valid key.",
    "Every command takes --json (one JSON value on stdout) and --help.",
    "The store is DENO_KV_PATH (default ./data/keys.db).",
  ].join("\n");
}

function commandHelp(name: string, command: Command): string {
  const options: Record<string, OptionSpec> = {
    ...command.options,
    json: JSON_OPTION,
  };
  return [
    `${command.summary[0].toUpperCase()}${command.summary.slice(1)}.`,
    "",
    `Usage: deno task keys ${command.usage} [--json]`,
    "",
    "Options:",
    ...Object.entries(options).map(([option, spec]) =>
      `  --${
        (option + (spec.type === "string" ? " VALUE" : "")).padEnd(14)
      }${spec.help}`
    ),
    "  --help          show this help",
    ...(name === "create" || name === "rotate"
      ? ["", "The key is printed once, on stdout; messages go to stderr."]
      : []),
  ].join("\n");
}

function parse(args: string[]): {
  name: string;
  command: Command;
  values: Context["values"];
  positionals: string[];
} | { help: string } {
  const [name, ...rest] = args;
  if (
    name === undefined || name === "--help" || name === "-h" || name === "help"
  ) {
    return { help: mainHelp() };
  }
  const command = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (command === undefined) {
    throw new UsageError(
      `Unknown command ${JSON.stringify(name)}; the commands are ${
        Object.keys(COMMANDS).join(", ")
      } (see --help)`,
    );
  }
  let parsed;
  try {
    parsed = parseArgs({
      args: rest,
      options: {
        ...Object.fromEntries(
          Object.entries(command.options).map((
            [k, v],
          ) => [k, { type: v.type }]),
        ),
        json: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    // node:util's messages are long and end in a period; keep the first sentence.
    const message = error instanceof Error ? error.message : String(error);
    throw new UsageError(
      `${message.split(/\.\s|\.$/)[0]}; see "keys ${name} --help"`,
    );
  }
  if (parsed.values.help) return { help: commandHelp(name, command) };
  const [min, max, what] = command.positionals;
  if (parsed.positionals.length < min) {
    throw new UsageError(`${name} needs ${what}; see "keys ${name} --help"`);
  }
  if (parsed.positionals.length > max) {
    throw new UsageError(
      `${name} takes ${max === 0 ? "no arguments" : `one ${what}`}, not ${
        JSON.stringify(parsed.positionals.slice(max).join(" "))
      }; see "keys ${name} --help"`,
    );
  }
  return {
    name,
    command,
    values: parsed.values,
    positionals: parsed.positionals,
  };
}

function actor(): string {
  let user = processEnv("USER") ?? processEnv("LOGNAME");
  let host = "unknown";
  try {
    // Containers often set no USER; the uid still says who it was.
    user ??= `uid ${Deno.uid()}`;
    host = Deno.hostname();
  } catch {
    // Without --allow-sys the audit still records what it could.
  }
  user ??= "unknown";
  return `${user}@${host}`;
}

/** Runs the console with the given arguments; returns the exit code. */
export async function main(args: string[]): Promise<number> {
  let store: KeyStore | undefined;
  const out = new Output();
  try {
    const parsed = parse(args);
    if ("help" in parsed) {
      out.line(parsed.help);
      return 0;
    }
    store = await openStore(readStoreLocation(processEnv));
    await parsed.command.run({
      store,
      values: parsed.values,
      positionals: parsed.positionals,
      json: parsed.values.json === true,
      out,
      actor: actor(),
    });
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(error.message);
      return 2;
    }
    console.error(failure(error));
    return 1;
  } finally {
    out.flush();
    await store?.close();
  }
}

function failure(error: unknown): string {
  if (error instanceof ConfigError || error instanceof StoreInputError) {
    return error.message;
  }
  if (error instanceof Deno.errors.NotCapable) {
    return `The store is outside what this task may read and write: ${error.message}; keep DENO_KV_PATH under ./data or run admin.ts with matching --allow flags`;
  }
  return `The command failed: ${
    error instanceof Error ? error.message : String(error)
  }`;
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
