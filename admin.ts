/**
 * The admin console, run as `deno task keys`: a thin shell over the same
 * {@linkcode KeyStore} the server reads.
 *
 * Exit codes: 0 done, 1 the command failed (unknown key, name taken, store
 * unavailable, a confirmation answered no), 2 the command line was wrong.
 * With `--json`, stdout carries exactly one JSON value; every message goes to
 * stderr.
 *
 * At a terminal, `revoke` and `rotate` ask before they change anything, and
 * listings are coloured and fitted to the terminal's width; from a script
 * (stdin or stdout not a terminal) they neither ask nor colour.
 *
 * @module
 */

import { fstatSync } from "node:fs";
import { parseArgs } from "node:util";
import { generateApiKey } from "./lib/api_key.ts";
import { ConfigError, processEnv, readStoreLocation } from "./lib/config.ts";
import { describeStoreError } from "./lib/console/store_errors.ts";
import {
  InvalidFieldError,
  KeyCollisionError,
  KeyNotFoundError,
  RotateRevokedError,
  StoreInputError,
} from "./lib/store/errors.ts";
import { openStore } from "./lib/store/open.ts";
import {
  normalizeActor,
  normalizeEmail,
  normalizeName,
  normalizeReason,
  publicRecord,
} from "./lib/store/records.ts";
import type { AuditEntry, KeyRecord, KeyStore } from "./lib/store/types.ts";
import { type Column, fitColumns, headingLine, rowLine } from "./lib/_table.ts";
import { BackupError, counted, exportTo, importFrom } from "./lib/backup.ts";
import { writeAll, writeAllSync } from "./lib/_write_all.ts";
import {
  paint,
  relativeTime,
  terminalColumns,
  type Tone,
  wantsColour,
} from "./lib/_console_format.ts";
import { escapeControlCharacters } from "./lib/_control_characters.ts";

/** A wrong command line: exit code 2. */
class UsageError extends Error {}

/** A command that could not be done, with a message meant for the admin as is: exit code 1. */
class CommandError extends Error {}

interface OptionSpec {
  type: "string" | "boolean";
  help: string;
}

interface Command {
  summary: string;
  usage: string;
  options: Record<string, OptionSpec>;
  positionals: [min: number, max: number, name?: string];
  /** Lines the command's --help adds after the options. */
  notes?: string[];
  run(ctx: Context): Promise<void>;
}

interface Context {
  store: KeyStore;
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
  json: boolean;
  out: Output;
  actor: string;
  /** One instant for the whole command, so every "3 days ago" agrees. */
  now: number;
  /** Colour stdout: it is a terminal and NO_COLOR is unset. */
  colour: boolean;
  /** The terminal's width when stdout is one; undefined for pipes and files. */
  columns: number | undefined;
  /** Someone can answer a question: stdin is a terminal. */
  interactive: boolean;
}

const JSON_OPTION: OptionSpec = {
  type: "boolean",
  help: "print exactly one JSON value on stdout",
};

const YES_OPTION: OptionSpec = {
  type: "boolean",
  help: "do not ask for confirmation at a terminal",
};

const KEY_ARGUMENT = "KEY (an id or a name)";
const FILE_ARGUMENT = "FILE (under ./data, such as ./data/backup.jsonl)";

const STORE_WARNING = [
  "This key is shown once and cannot be recovered: only its hash is stored.",
  "Give it to the integrator now, to keep in a secrets manager, an environment variable or an encrypted configuration file;",
  "never in source control, a URL or a log line. If it is lost, rotate it.",
].join("\n");

const CONFIRM_NOTES = [
  "",
  "At a terminal this asks for confirmation first; --yes skips the question.",
  "When stdin is not a terminal (a script, a pipe) it does not ask.",
];

const FILE_NOTES = [
  "",
  "FILE must be under ./data: the keys task may read and write nowhere else.",
  "The file holds every key record (hashes and e-mail addresses, never keys)",
  "and the audit log, one JSON value a line: keep it as private as the store.",
];

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
    notes: ["", "The key is printed once, on stdout; messages go to stderr."],
    async run({ store, values, json, out, actor }) {
      const name = checked(normalizeName, required(values, "name"));
      const email = checked(normalizeEmail, required(values, "email"));
      refuseDiscardingStdout();
      const fresh = generateApiKey();
      const record = await store.create({
        name,
        email,
        hash: fresh.hash,
        hint: fresh.hint,
      }, { actor });
      // Stored first, so that a key on stdout always works; a key nobody
      // received is revoked again, which touches no other key.
      try {
        out.deliver(
          (json
            ? jsonText({ ...publicRecord(record), key: fresh.key })
            : fresh.key) +
            "\n",
        );
      } catch (error) {
        throw await undeliveredCreate(store, record, { error, actor });
      }
      report(
        `Created key ${named(record)} for ${
          visible(record.email)
        }.\n${STORE_WARNING}`,
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
    notes: [
      "",
      "Times are shown relative to now; --json gives them exactly (ISO 8601).",
      "At a terminal the table is fitted to its width and coloured (revoked",
      "keys dim, keys seen in a URL yellow); NO_COLOR turns colour off.",
    ],
    async run(ctx) {
      const { store, values, json, out } = ctx;
      const all = values.all === true;
      const records = store.list({ includeRevoked: all });
      if (json) {
        out.write("[");
        let first = true;
        for await (const record of records) {
          out.write((first ? "" : ",") + jsonText(publicRecord(record)));
          first = false;
        }
        out.line("]");
        return;
      }
      let columns = listColumns(ctx.now, all);
      let dropped: string[] = [];
      if (ctx.columns !== undefined) {
        ({ columns, dropped } = fitColumns(columns, ctx.columns));
      }
      out.line(headingLine(columns, {
        paint: ctx.colour ? (text) => paint(text, "bold") : undefined,
      }));
      let count = 0;
      const exposed: number[] = [];
      for await (const record of records) {
        out.line(rowLine(columns, record, {
          paint: ctx.colour
            ? (text, column) => tinted(text, recordTone(record, column.heading))
            : undefined,
        }));
        count++;
        if (record.exposedAt !== null && record.status === "valid") {
          exposed.push(record.id);
        }
      }
      out.flush();
      report(
        `${count} ${all ? "" : "valid "}key${count === 1 ? "" : "s"}`,
      );
      if (exposed.length > 0) {
        report(
          `Sent in a URL, where proxies and logs may keep them: ${
            exposed.join(", ")
          }; rotate each with "keys rotate KEY"`,
        );
      }
      if (dropped.length > 0) {
        report(
          `Left out to fit the terminal: ${
            dropped.join(", ")
          }; widen it, or use "keys show KEY" or --json`,
        );
      }
    },
  },
  show: {
    summary: "show one key",
    usage: "show KEY",
    options: {},
    positionals: [1, 1, KEY_ARGUMENT],
    notes: ["", "Times are shown exactly (ISO 8601) and relative to now."],
    async run(ctx) {
      printRecord(ctx, await resolve(ctx.store, ctx.positionals[0]));
    },
  },
  revoke: {
    summary: "revoke a key at once and for good",
    usage: "revoke KEY [--reason TEXT] [--yes]",
    options: {
      reason: {
        type: "string",
        help: "why: lost, leaked, decommissioned, person left",
      },
      yes: YES_OPTION,
    },
    positionals: [1, 1, KEY_ARGUMENT],
    notes: CONFIRM_NOTES,
    async run(ctx) {
      const { store, values, positionals, actor } = ctx;
      const reason = typeof values.reason === "string"
        ? checked(normalizeReason, values.reason)
        : undefined;
      const target = await resolve(store, positionals[0]);
      if (target.status === "valid") {
        await confirm(ctx, {
          question: `Revoke key ${describe(target)}? ` +
            "The next request with it gets 401.",
          declined: `Key ${named(target)} was not revoked; ` +
            "answer y to revoke it, or pass --yes",
        });
      }
      const { record, changed } = await store.revoke(target.id, {
        actor,
        reason,
      });
      report(
        changed
          ? `Revoked key ${named(record)}: the next request with it gets 401.`
          : `Key ${
            named(record)
          } was already revoked at ${record.revokedAt}; nothing changed.`,
      );
      printRecord(ctx, record);
    },
  },
  rotate: {
    summary: "revoke a key and generate its replacement in one step",
    usage: "rotate KEY [--yes]",
    options: { yes: YES_OPTION },
    positionals: [1, 1, KEY_ARGUMENT],
    notes: [
      "",
      "The new key is printed once, on stdout; messages and the question go",
      "to stderr, so NEW=$(deno task keys rotate KEY) captures only the key.",
      "The old key stays valid until the new one is written: if stdout does not",
      "take it (the reader has exited), nothing changes and the command exits 1.",
      ...CONFIRM_NOTES.slice(1),
    ],
    async run(ctx) {
      const { store, positionals, json, out, actor } = ctx;
      const target = await resolve(store, positionals[0]);
      // A revoked key cannot be rotated: say so without asking, or writing a key.
      if (target.status !== "valid") throw new RotateRevokedError(target.id);
      await confirm(ctx, {
        question: `Rotate key ${describe(target)}? ` +
          "It is revoked at once: requests with it get 401 until the installation has the new key.",
        declined: `Key ${named(target)} was not rotated; ` +
          "answer y to rotate it, or pass --yes",
      });
      refuseDiscardingStdout();
      const fresh = generateApiKey();
      if (await store.findByHash(fresh.hash) !== null) {
        throw new KeyCollisionError();
      }
      // The old key must work until the new one is out, and the store holds
      // one valid key per name: so the key is written first, and the value is
      // finished (the newline, the rest of the JSON) only once the store has
      // swapped the keys. A reader that waits for a whole line or a whole
      // JSON value never takes a key the store does not hold.
      try {
        out.deliver(json ? `{"key":${JSON.stringify(fresh.key)},` : fresh.key);
      } catch (error) {
        throw new CommandError(
          `Key ${
            named(target)
          } was not rotated: its replacement could not be written to stdout (${
            writeFailure(error)
          }); nothing changed and key ${target.id} is still valid; run the command again with stdout to a terminal, a file or a live pipe`,
        );
      }
      const { revoked, created } = await rotateAfterWrite(store, target, {
        fresh,
        actor,
      });
      try {
        out.deliver(
          json
            ? jsonText({
              ...publicRecord(created),
              replaces: publicRecord(revoked),
            }).slice(1) + "\n"
            : "\n",
        );
      } catch (error) {
        throw new CommandError(
          `Key ${target.id} was rotated into key ${
            named(created)
          }, but stdout closed before the new key was complete (${
            writeFailure(error)
          }); if whatever read stdout did not keep the new key, rotate key ${created.id} again`,
        );
      }
      report(
        `Revoked key ${revoked.id} and created key ${named(created)} for ${
          visible(created.email)
        }.\n${STORE_WARNING}`,
      );
    },
  },
  audit: {
    summary: "show the audit log, oldest first",
    usage: "audit [KEY]",
    options: {},
    positionals: [0, 1, KEY_ARGUMENT],
    async run({ store, positionals, json, out }) {
      const keyId = positionals[0] === undefined
        ? undefined
        : (await resolve(store, positionals[0])).id;
      const entries = store.audit({ keyId });
      if (json) {
        const all: AuditEntry[] = [];
        for await (const entry of entries) all.push(entry);
        out.line(jsonText(all));
        return;
      }
      out.line(headingLine(AUDIT_COLUMNS));
      for await (const entry of entries) {
        out.line(rowLine(AUDIT_COLUMNS, entry));
      }
    },
  },
  export: {
    summary: "back up every key record and the audit log to a new FILE",
    usage: "export FILE",
    options: {},
    positionals: [1, 1, FILE_ARGUMENT],
    notes: [
      ...FILE_NOTES,
      "An existing FILE is never overwritten, and the file appears under its",
      'name only once complete. Restore it with "keys import FILE".',
    ],
    async run({ store, positionals, json, out, actor }) {
      const summary = await exportTo(store, positionals[0], { actor });
      if (json) out.line(JSON.stringify(summary));
      console.error(
        `Exported ${counted(summary)} to ${summary.file}. ` +
          "It holds hashes and e-mail addresses, not keys: keep it as private as the store.",
      );
    },
  },
  import: {
    summary: "restore a FILE written by export into an empty store",
    usage: "import FILE | import --abort",
    options: {
      abort: {
        type: "boolean",
        help: "end an interrupted import, emptying the store again",
      },
    },
    positionals: [0, 1, FILE_ARGUMENT],
    notes: [
      ...FILE_NOTES,
      "The store must be empty (a new DENO_KV_PATH); a failed import leaves it",
      "empty again. Restored keys work at once: the file holds their hashes,",
      "and no key of the file works before the whole file is in. Only one",
      "import runs at a time. If an import was killed, no key works and every",
      'change is refused until "keys import --abort" empties the store again.',
    ],
    async run({ store, values, positionals, json, out, actor }) {
      if (values.abort === true) {
        if (positionals.length > 0) {
          throw new UsageError(
            'import --abort takes no FILE; run "keys import FILE" afterwards',
          );
        }
        const aborted = await store.abortImport({ actor });
        if (json) out.line(JSON.stringify({ aborted }));
        console.error(
          aborted
            ? 'Aborted the unfinished import; the store is empty again. Run "keys import FILE" to import again'
            : "No import was unfinished; nothing changed",
        );
        return;
      }
      if (positionals.length === 0) {
        throw new UsageError(
          `import needs ${FILE_ARGUMENT}; see "keys import --help"`,
        );
      }
      const summary = await importFrom(store, positionals[0], { actor });
      if (json) out.line(JSON.stringify(summary));
      console.error(
        `Imported ${counted(summary)} from ${summary.file}` +
          (summary.exportedAt ? `, exported at ${summary.exportedAt}` : ""),
      );
    },
  },
};

/** The listing's columns, narrowest first to go when a terminal is narrow. */
function listColumns(now: number, all: boolean): Column<KeyRecord>[] {
  const ago = (iso: string | null, none = "") =>
    iso === null ? none : relativeTime(iso, { now });
  const columns: Column<KeyRecord>[] = [
    { heading: "ID", width: 6, cell: (r) => String(r.id) },
    { heading: "NAME", width: 24, min: 10, cell: (r) => r.name },
    {
      heading: "EMAIL",
      width: 28,
      min: 12,
      dropRank: 3,
      cell: (r) => r.email,
    },
    { heading: "STATUS", width: 7, cell: (r) => r.status },
    { heading: "CREATED", width: 14, cell: (r) => ago(r.createdAt) },
    {
      heading: "LAST USED",
      width: 14,
      dropRank: 5,
      cell: (r) => ago(r.lastUsedAt, "never"),
    },
    { heading: "HINT", width: 10, dropRank: 2, cell: (r) => r.hint },
    // Which keys were exposed is repeated on stderr, so this column goes first.
    {
      heading: "EXPOSED IN A URL",
      width: 34,
      min: 16,
      dropRank: 1,
      cell: (r) =>
        r.exposedAt === null
          ? ""
          : `${ago(r.exposedAt)} from ${r.exposedFrom ?? "an unknown address"}`,
    },
  ];
  if (!all) return columns;
  return [
    ...columns,
    { heading: "REVOKED", width: 14, cell: (r) => ago(r.revokedAt) },
    {
      heading: "REASON",
      width: 32,
      min: 12,
      dropRank: 4,
      cell: (r) => r.revokedReason ?? "",
    },
  ];
}

/** Revoked keys recede; a key seen in a URL stands out, as it should be rotated. */
function recordTone(record: KeyRecord, field: string): Tone | undefined {
  const status = field === "STATUS" || field === "status";
  if (record.status === "revoked") return status ? "red" : "dim";
  const exposed = field === "EXPOSED IN A URL" || field === "exposedAt" ||
    field === "exposedFrom";
  if (record.exposedAt !== null && (status || exposed)) return "yellow";
  return undefined;
}

function tinted(text: string, tone: Tone | undefined): string {
  return tone === undefined ? text : paint(text, tone);
}

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

const TIME_FIELDS = new Set([
  "createdAt",
  "revokedAt",
  "exposedAt",
  "lastUsedAt",
]);

function printRecord(ctx: Context, record: KeyRecord): void {
  if (ctx.json) {
    ctx.out.line(jsonText(publicRecord(record)));
    return;
  }
  for (const [field, value] of Object.entries(publicRecord(record))) {
    let text = value === null ? "" : visible(String(value));
    if (field === "lastUsedAt" && value === null) text = "never";
    else if (TIME_FIELDS.has(field) && typeof value === "string") {
      text = `${value} (${relativeTime(value, { now: ctx.now })})`;
    }
    const tone = ctx.colour ? recordTone(record, field) : undefined;
    // Only the status and the exposure are coloured here: a dim page is hard to read.
    const shown = tone === "dim" ? text : tinted(text, tone);
    ctx.out.line(`${field.padEnd(14)}${shown}`.trimEnd());
  }
}

function describe(record: KeyRecord): string {
  return `${named(record)} (${visible(record.email)})`;
}

/** A key as messages name it: its id and its name, quoted and made harmless. */
function named(record: KeyRecord): string {
  return `${record.id} "${visible(record.name)}"`;
}

/**
 * A stored field as the console shows it: control and bidirectional
 * characters, newlines included, as visible `\uXXXX` escapes.
 */
function visible(text: string): string {
  return escapeControlCharacters(text);
}

/** JSON for stdout: exact JSON still, with nothing a terminal would act on. */
function jsonText(value: unknown): string {
  return escapeControlCharacters(JSON.stringify(value));
}

/**
 * A message on stderr. Every line passes the same filter as stored fields,
 * so that a name quoted by a store error cannot steer the terminal either.
 */
function report(text: string): void {
  console.error(safeLines(text));
}

function safeLines(text: string): string {
  return text.split("\n").map(escapeControlCharacters).join("\n");
}

/**
 * Input the admin typed, checked before the store is touched: a refusal is
 * a usage error (exit 2) naming the option.
 */
function checked(normalize: (text: string) => string, text: string): string {
  try {
    return normalize(text);
  } catch (error) {
    if (error instanceof InvalidFieldError) {
      throw new UsageError(`--${error.field}: ${describeStoreError(error)}`);
    }
    throw error;
  }
}

/** Why stdout did not take a write, for a message. */
function writeFailure(error: unknown): string {
  if (error instanceof Deno.errors.BrokenPipe) {
    return "the program reading it has exited";
  }
  return error instanceof Error ? error.message : String(error);
}

/**
 * The failure of a create whose key could not be written: the key is
 * revoked again, as nobody has it, and the message says what the store
 * holds now.
 */
async function undeliveredCreate(
  store: KeyStore,
  record: KeyRecord,
  options: { error: unknown; actor: string },
): Promise<CommandError> {
  const cause = writeFailure(options.error);
  const again =
    "run the command again with stdout to a terminal, a file or a live pipe";
  try {
    await store.revoke(record.id, {
      actor: options.actor,
      reason: "not delivered",
    });
  } catch (error) {
    return new CommandError(
      `Key ${record.id} was created but could not be written to stdout (${cause}), and revoking it failed (${
        failure(error)
      }); nobody has this key: revoke it with "keys revoke ${record.id} --reason 'not delivered'", then ${again}`,
    );
  }
  return new CommandError(
    `Key ${record.id} was created but could not be written to stdout (${cause}); it has been revoked and no other key changed; ${again}`,
  );
}

/**
 * The store's rotation, once the new key is on stdout. When the store
 * fails, the key written is not stored unless the store says otherwise, so
 * the message reads back what the store holds.
 */
async function rotateAfterWrite(
  store: KeyStore,
  target: KeyRecord,
  options: { fresh: { hash: string; hint: string }; actor: string },
): Promise<{ revoked: KeyRecord; created: KeyRecord }> {
  try {
    return await store.rotate(target.id, options.fresh, {
      actor: options.actor,
    });
  } catch (error) {
    const cause = failure(error);
    let state: string;
    try {
      // A commit whose answer was lost may still have happened.
      const created = await store.findByHash(options.fresh.hash);
      const old = await store.get(target.id);
      if (created !== null && old !== null) {
        return { revoked: old, created };
      }
      state = old?.status === "valid"
        ? `key ${target.id} is unchanged and still valid`
        : `key ${target.id} is now ${
          old?.status ?? "gone"
        }, changed by someone else`;
    } catch {
      state =
        `the store cannot say whether key ${target.id} is still valid; run "keys show ${target.id}" once it answers`;
    }
    throw new CommandError(
      `The key written to stdout was not stored and does not work (${cause}); discard it; ${state}; run the command again`,
    );
  }
}

/**
 * Asks a yes/no question on stderr (stdout may be captured, as with
 * `NEW=$(keys rotate …)`) when someone is at the terminal; a script is never
 * asked. Anything but y or yes declines.
 */
async function confirm(
  ctx: Context,
  text: { question: string; declined: string },
): Promise<void> {
  if (ctx.values.yes === true || !ctx.interactive) return;
  await writeAll(Deno.stderr, `${safeLines(text.question)} [y/N] `);
  const answer = await readAnswer();
  if (answer === null) await writeAll(Deno.stderr, "\n");
  if (!/^\s*y(es)?\s*$/i.test(answer ?? "")) {
    throw new CommandError(text.declined);
  }
}

/** One line from stdin, without its newline; null at end of input. */
async function readAnswer(): Promise<string | null> {
  const decoder = new TextDecoder();
  const buffer = new Uint8Array(256);
  let text = "";
  while (!text.includes("\n")) {
    const n = await Deno.stdin.read(buffer);
    if (n === null) return text === "" ? null : text;
    text += decoder.decode(buffer.subarray(0, n), { stream: true });
  }
  return text.slice(0, text.indexOf("\n"));
}

/** A key by id (all digits) or by name (valid keys only). */
async function resolve(store: KeyStore, ref: string): Promise<KeyRecord> {
  const record = /^\d+$/.test(ref)
    ? await store.get(Number(ref))
    : await store.getByName(ref);
  if (record === null) {
    throw new KeyNotFoundError(/^\d+$/.test(ref) ? Number(ref) : ref);
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

  /**
   * Writes text now, with whatever is pending, and throws when stdout does
   * not take all of it: for a key, whose loss must not pass unnoticed.
   */
  deliver(text: string): void {
    const bytes = this.#encoder.encode(this.#chunks.join("") + text);
    this.#chunks = [];
    this.#size = 0;
    if (this.#closed) throw new Deno.errors.BrokenPipe("stdout is closed");
    writeAllSync(Deno.stdout, bytes);
  }

  flush(): void {
    const bytes = this.#encoder.encode(this.#chunks.join(""));
    this.#chunks = [];
    this.#size = 0;
    if (this.#closed) return;
    try {
      writeAllSync(Deno.stdout, bytes);
    } catch (error) {
      // The reader went away (`keys list | head`): it wants no more, which
      // is no failure of the command.
      if (!(error instanceof Deno.errors.BrokenPipe)) throw error;
      this.#closed = true;
    }
  }

  #closed = false;
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
    "FILE must be under ./data, the only folder the keys task may read and write.",
    "Every command takes --json (one JSON value on stdout) and --help.",
    "At a terminal, revoke and rotate ask first (--yes skips the question) and",
    "listings are coloured; set NO_COLOR to turn colour off. Scripts, whose",
    "stdin and stdout are not terminals, are neither asked nor coloured.",
    "The store is DENO_KV_PATH (default ./data/keys.db).",
  ].join("\n");
}

function commandHelp(command: Command): string {
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
    ...(command.notes ?? []),
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
  if (parsed.values.help) return { help: commandHelp(command) };
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

/** The OS user and host, made safe and bounded for the audit log. */
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
  return normalizeActor(`${user}@${host}`);
}

/** The device numbers of /dev/null: makedev(1, 3) on Linux, (3, 2) on macOS. */
const NULL_DEVICES = new Set([259, 0x3000002]);

/**
 * Refuses to print a key into nothing. A closed stdout looks like success:
 * the runtime reopens it on /dev/null, where every write "succeeds", so
 * `keys rotate … >&-` would revoke the old key and hand the new one to nobody.
 */
function refuseDiscardingStdout(): void {
  let discards = false;
  try {
    const stat = fstatSync(1);
    discards = stat.isCharacterDevice() && NULL_DEVICES.has(stat.rdev);
  } catch {
    // Cannot tell: the write itself will report what goes wrong.
  }
  if (discards) {
    throw new CommandError(
      "stdout is closed or /dev/null, where the key would be lost; nothing changed; send stdout to a terminal, a file or a pipe",
    );
  }
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
      now: Date.now(),
      colour: wantsColour(Deno.stdout, { env: processEnv }),
      columns: terminalColumns(),
      interactive: Deno.stdin.isTerminal(),
    });
    return 0;
  } catch (error) {
    if (
      error instanceof UsageError ||
      (error instanceof BackupError && error.usage)
    ) {
      report(error.message);
      return 2;
    }
    report(failure(error));
    return 1;
  } finally {
    out.flush();
    await store?.close();
  }
}

function failure(error: unknown): string {
  if (
    error instanceof ConfigError || error instanceof CommandError ||
    error instanceof BackupError
  ) {
    return error.message;
  }
  if (error instanceof StoreInputError) return describeStoreError(error);
  if (error instanceof Deno.errors.NotCapable) {
    return `The store is outside what this task may read and write: ${error.message}; keep DENO_KV_PATH under ./data or run admin.ts with matching --allow flags`;
  }
  return `The command failed: ${
    describeStoreError(error) ??
      (error instanceof Error ? error.message : String(error))
  }`;
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
