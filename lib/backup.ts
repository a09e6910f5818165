/**
 * Backup and restore of a store as a file: `keys export` and `keys import`.
 *
 * An export is JSON lines: a header naming the format, one line per key
 * record or audit line as `exportAll()` yields them, and an end line with the
 * counts, so that an import can tell a complete file from one cut short.
 *
 * @module
 */

import { describeStoreError } from "./console/store_errors.ts";
import { ImportStateError, StoreInputError } from "./store/errors.ts";
import type {
  AuditEntry,
  ExportItem,
  KeyRecord,
  KeyStore,
} from "./store/types.ts";
import { pathExists } from "./_exists.ts";
import { folderOf } from "./permissions.ts";
import { writeAll } from "./_write_all.ts";

/** Why a backup was refused or failed: the code of a {@linkcode BackupError}. */
export type BackupErrorCode =
  /** FILE names no file (import), or a folder that does not exist (export). */
  | "file_not_found"
  /** An export's FILE exists already, and an export never overwrites. */
  | "file_exists"
  /** The file is not a complete, well-formed export. */
  | "file_invalid"
  /** This user or process may not read or write FILE. */
  | "file_refused"
  /** Keys changed during every attempt to export. */
  | "export_changed";

/** A backup refused or failed; its message is meant for the admin as is. */
export class BackupError extends Error {
  override name = "BackupError";
  /** True when the command line named the file wrongly (exit code 2). */
  readonly usage: boolean;
  /** Stable, for scripts and tests: never match on the message. */
  readonly code: BackupErrorCode;

  constructor(
    message: string,
    options: { usage?: boolean; code?: BackupErrorCode } = {},
  ) {
    super(message);
    this.usage = options.usage ?? false;
    this.code = options.code ?? "file_invalid";
  }
}

const EXPORT_FORMAT = "integration-service-keys";
/** FILE as stdout for an export, stdin for an import. */
const STDOUT = "-";
/**
 * Version 2 added expiresAt, replacedBy and retires, and each key's
 * allowFrom, networks and refusedUses; a version-1 file still imports, its
 * keys without a lifetime, usable from anywhere, with nothing seen.
 */
const EXPORT_VERSION = 2;
/** The versions an import reads. */
const IMPORT_VERSIONS: readonly unknown[] = [1, EXPORT_VERSION];
/** No line of an export comes near this; a longer one is not an export. */
const MAX_LINE_CHARS = 1024 * 1024;
const PROGRESS_EVERY_MS = 2000;

/** What `export` and `import --json` print. */
export interface BackupSummary {
  file: string;
  keys: number;
  audit: number;
  exportedAt: string | null;
}

export function counted(summary: { keys: number; audit: number }): string {
  return `${summary.keys} key${
    summary.keys === 1 ? "" : "s"
  } and ${summary.audit} audit line${summary.audit === 1 ? "" : "s"}`;
}

/** A file operation refused or failed, reworded for the admin. */
function fileProblem(error: unknown, file: string, verb: string): unknown {
  if (error instanceof Deno.errors.NotCapable) {
    return new BackupError(
      `This process may not touch ${
        JSON.stringify(file)
      }; run the command through deno task -q keys, which grants access to the FILE it names`,
      { code: "file_refused" },
    );
  }
  if (error instanceof Deno.errors.PermissionDenied) {
    return new BackupError(
      `${file} cannot be ${verb} by this user (${error.message}); check the owner and mode of the file and its folder`,
      { code: "file_refused" },
    );
  }
  return error;
}

/** Prints a line on stderr every few seconds while a long backup or restore runs. */
class Progress {
  #verb: string;
  #last = Date.now();

  constructor(verb: string) {
    this.#verb = verb;
  }

  tick(counts: { keys: number; audit: number }): void {
    const now = Date.now();
    if (now - this.#last < PROGRESS_EVERY_MS) return;
    this.#last = now;
    console.error(`${this.#verb} ${counted(counts)} so far…`);
  }
}

/** Batches lines into few writes. */
class LineWriter {
  #file: { write(bytes: Uint8Array): Promise<number> };
  #chunks: string[] = [];
  #size = 0;

  constructor(file: { write(bytes: Uint8Array): Promise<number> }) {
    this.#file = file;
  }

  async line(text: string): Promise<void> {
    this.#chunks.push(text, "\n");
    this.#size += text.length + 1;
    if (this.#size >= 256 * 1024) await this.flush();
  }

  async flush(): Promise<void> {
    const text = this.#chunks.join("");
    this.#chunks = [];
    this.#size = 0;
    await writeAll(this.#file, new TextEncoder().encode(text));
  }
}

/** The folder as the keys task grants it, so a backslash is part of a name. */
function splitPath(file: string): { folder: string; base: string } {
  return {
    folder: folderOf(file),
    base: file.slice(file.lastIndexOf("/") + 1),
  };
}

async function removeQuietly(path: string): Promise<void> {
  try {
    await Deno.remove(path);
  } catch {
    // Already gone, or unremovable: the error that matters is the caller's.
  }
}

function alreadyThere(file: string): BackupError {
  return new BackupError(
    `${file} already exists, and an export never overwrites a file; choose a new name or remove it first`,
    { code: "file_exists" },
  );
}

/** Exports begun afresh because keys changed meanwhile, before giving up. */
const EXPORT_ATTEMPTS = 3;

/**
 * Writes the export to a hidden temporary file beside FILE and gives it its
 * name only when complete and on disk, so that a crash never leaves half a
 * backup under the name an admin will restore from.
 *
 * The store is read in two passes (keys, then audit) rather than as one
 * snapshot; the store's revision, which every change moves (but not the
 * server's last-used times), shows whether anything changed in between, and
 * if so the export starts again.
 */
export async function exportTo(
  store: KeyStore,
  file: string,
  options: { actor: string },
): Promise<BackupSummary> {
  if (file === STDOUT) return await exportToStdout(store, options);
  const { folder, base } = splitPath(file);
  if (base === "" || base === "." || base === "..") {
    throw new BackupError(
      `FILE must name a file, not ${
        JSON.stringify(file)
      }; use a path such as /var/backups/keys.jsonl`,
      { usage: true, code: "file_not_found" },
    );
  }
  for (let attempt = 1;; attempt++) {
    const temp = `${folder}/.${base}.${crypto.randomUUID().slice(0, 8)}.tmp`;
    // The unfinished file holds hashes and e-mail addresses: Ctrl-C, a
    // SIGTERM or a closed terminal must not leave it behind.
    using _guard = removedOnSignal(temp);
    const before = await store.revision();
    const summary = await writeExport(store, {
      file,
      folder,
      temp,
      ...options,
    });
    if (await store.revision() === before) {
      await publish(temp, file);
      return summary;
    }
    await removeQuietly(temp);
    if (attempt === EXPORT_ATTEMPTS) {
      throw new BackupError(
        `Keys changed during each of ${EXPORT_ATTEMPTS} attempts to export; export again when no one is changing keys`,
        { code: "export_changed" },
      );
    }
    console.error("Keys changed during the export; starting again");
  }
}

/**
 * The export on stdout, streamed: it cannot be begun again once written, so
 * when keys change meanwhile it stops before the end line (which an import
 * requires) and says so.
 */
async function exportToStdout(
  store: KeyStore,
  options: { actor: string },
): Promise<BackupSummary> {
  const before = await store.revision();
  const writer = new LineWriter(Deno.stdout);
  const summary = await writeLines(store, writer, {
    file: "stdout",
    actor: options.actor,
  });
  if (await store.revision() !== before) {
    await writer.flush();
    throw new BackupError(
      "Keys changed during the export, so it stopped before its end line and an import will refuse what was written; export again when no one is changing keys",
      { code: "export_changed" },
    );
  }
  await writer.line(
    JSON.stringify({ type: "end", keys: summary.keys, audit: summary.audit }),
  );
  await writer.flush();
  return summary;
}

/** The header and every item, without the end line. */
async function writeLines(
  store: KeyStore,
  writer: LineWriter,
  target: { file: string; actor: string },
): Promise<BackupSummary> {
  const summary: BackupSummary = {
    file: target.file,
    keys: 0,
    audit: 0,
    exportedAt: new Date().toISOString(),
  };
  await writer.line(JSON.stringify({
    format: EXPORT_FORMAT,
    version: EXPORT_VERSION,
    exportedAt: summary.exportedAt,
    exportedBy: target.actor,
  }));
  const progress = new Progress("Exported");
  for await (const item of store.exportAll()) {
    await writer.line(JSON.stringify(item));
    if (item.type === "key") summary.keys++;
    else summary.audit++;
    progress.tick(summary);
  }
  return summary;
}

async function writeExport(
  store: KeyStore,
  target: { file: string; folder: string; temp: string; actor: string },
): Promise<BackupSummary> {
  const { file, folder, temp } = target;
  let handle: Deno.FsFile;
  try {
    if (await pathExists(file)) throw alreadyThere(file);
    // 0600: the export names every integrator and holds every hash.
    handle = await Deno.open(temp, {
      createNew: true,
      write: true,
      mode: 0o600,
    });
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      throw new BackupError(
        `The folder ${folder} of FILE does not exist; create it or use a path such as /var/backups/keys.jsonl`,
        { usage: true, code: "file_not_found" },
      );
    }
    throw fileProblem(error, file, "written");
  }
  let summary: BackupSummary;
  try {
    const writer = new LineWriter(handle);
    summary = await writeLines(store, writer, target);
    await writer.line(
      JSON.stringify({ type: "end", keys: summary.keys, audit: summary.audit }),
    );
    await writer.flush();
    // The bytes reach the disk before the name does.
    await handle.sync();
  } catch (error) {
    handle.close();
    await removeQuietly(temp);
    throw fileProblem(error, file, "written");
  }
  handle.close();
  return summary;
}

/** Signals that end an export, with the exit code a shell gives them. */
const INTERRUPTIONS: [Deno.Signal, number][] = [
  ["SIGINT", 130],
  ["SIGTERM", 143],
  ["SIGHUP", 129],
];

/**
 * Until disposed, an interrupting signal removes `path` and ends the
 * process as the signal would have.
 */
function removedOnSignal(path: string): Disposable {
  const listeners = INTERRUPTIONS.map(([signal, code]): [
    Deno.Signal,
    () => void,
  ] => [signal, () => {
    try {
      Deno.removeSync(path);
    } catch {
      // Not created yet, or published and removed already.
    }
    console.error("Export interrupted; the unfinished file was removed");
    Deno.exit(code);
  }]);
  for (const [signal, listener] of listeners) {
    Deno.addSignalListener(signal, listener);
  }
  return {
    [Symbol.dispose]() {
      for (const [signal, listener] of listeners) {
        Deno.removeSignalListener(signal, listener);
      }
    },
  };
}

async function publish(temp: string, file: string): Promise<void> {
  try {
    // Unlike rename(), link() fails when the name is taken, even by a file
    // created during the export: an export never overwrites anything.
    await Deno.link(temp, file);
  } catch (error) {
    if (error instanceof Deno.errors.AlreadyExists) {
      await removeQuietly(temp);
      throw alreadyThere(file);
    }
    if (error instanceof Deno.errors.NotCapable) {
      await removeQuietly(temp);
      throw fileProblem(error, file, "written");
    }
    // A file system without hard links: check, then rename.
    if (await pathExists(file)) {
      await removeQuietly(temp);
      throw alreadyThere(file);
    }
    await Deno.rename(temp, file);
    return;
  }
  await removeQuietly(temp);
}

/**
 * Streams an export file line by line into `importAll()`, and words every
 * problem with the number of the line it is on.
 */
export async function importFrom(
  store: KeyStore,
  file: string,
  options: { actor: string },
): Promise<BackupSummary> {
  if (file === STDOUT) {
    if (Deno.stdin.isTerminal()) {
      // Otherwise it would wait in silence for input nobody knows to type.
      console.error(
        "Reading the export from stdin; paste it and end with Ctrl-D, or give a FILE",
      );
    }
    return await readImport(store, "stdin", Deno.stdin, options);
  }
  let handle: Deno.FsFile;
  try {
    handle = await Deno.open(file, { read: true });
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      throw new BackupError(
        `${file} does not exist; give the path of a file written by "keys export", such as /var/backups/keys.jsonl`,
        { usage: true, code: "file_not_found" },
      );
    }
    throw fileProblem(error, file, "read");
  }
  using _ = handle;
  return await readImport(store, file, handle, options);
}

async function readImport(
  store: KeyStore,
  file: string,
  handle: { read(buffer: Uint8Array): Promise<number | null> },
  options: { actor: string },
): Promise<BackupSummary> {
  const reader = new ExportReader(file, handle);
  try {
    const counts = await store.importAll(reader.items(), options);
    return {
      file,
      keys: counts.keys,
      audit: counts.audit,
      exportedAt: reader.exportedAt,
    };
  } catch (error) {
    throw reader.locate(error);
  }
}

class ExportReader {
  #file: string;
  #handle: { read(buffer: Uint8Array): Promise<number | null> };
  /** The line being handled; 0 before the first. */
  #line = 0;
  #done = false;
  exportedAt: string | null = null;

  constructor(
    file: string,
    handle: { read(buffer: Uint8Array): Promise<number | null> },
  ) {
    this.#file = file;
    this.#handle = handle;
  }

  /**
   * The store checks each record as it takes it, while this reader is still
   * on its line: such an error gets the line number added.
   */
  locate(error: unknown): unknown {
    if (
      error instanceof StoreInputError && this.#line > 0 && !this.#done &&
      // Not about the line: the import as a whole was aborted.
      !(error instanceof ImportStateError)
    ) {
      const text = describeStoreError(error);
      const message = text[0].toLowerCase() + text.slice(1);
      return new BackupError(
        `Line ${this.#line} of ${this.#file}: ${message}`,
      );
    }
    return error;
  }

  #problem(what: string, fix = "fix the line or export again"): BackupError {
    return new BackupError(
      `Line ${this.#line} of ${this.#file} ${what}; ${fix}`,
    );
  }

  async *items(): AsyncGenerator<ExportItem> {
    const progress = new Progress("Imported");
    const seen = { keys: 0, audit: 0 };
    let end: { keys: number; audit: number } | null = null;
    for await (const text of this.#lines()) {
      if (this.#line === 1) {
        this.#header(text);
        continue;
      }
      if (text.trim() === "") continue;
      if (end !== null) {
        throw this.#problem(
          "follows the end line",
          "remove what follows it, or export again",
        );
      }
      const value = this.#parse(text);
      if (value.type === "key" && isObject(value.record)) {
        seen.keys++;
        yield { type: "key", record: value.record as unknown as KeyRecord };
      } else if (value.type === "audit" && isObject(value.entry)) {
        seen.audit++;
        yield { type: "audit", entry: value.entry as unknown as AuditEntry };
      } else if (
        value.type === "end" && Number.isSafeInteger(value.keys) &&
        Number.isSafeInteger(value.audit)
      ) {
        end = { keys: value.keys as number, audit: value.audit as number };
      } else {
        throw this.#problem("is neither a key, an audit line nor the end line");
      }
      progress.tick(seen);
    }
    this.#done = true;
    if (this.#line === 0) {
      throw new BackupError(
        `${this.#file} is empty; give a file written by "keys export"`,
      );
    }
    if (end === null) {
      throw new BackupError(
        `${this.#file} ends at line ${this.#line} without its end line, so it was cut short; copy it again or export again`,
      );
    }
    if (end.keys !== seen.keys || end.audit !== seen.audit) {
      throw new BackupError(
        `The end line of ${this.#file} counts ${
          counted(end)
        }, but the file holds ${counted(seen)}; export again`,
      );
    }
  }

  #header(text: string): void {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      // reported below, like any other line that is not a header
    }
    if (!isObject(value) || value.format !== EXPORT_FORMAT) {
      throw this.#problem(
        "is not the header of a keys export",
        'give a file written by "keys export"',
      );
    }
    if (!IMPORT_VERSIONS.includes(value.version)) {
      throw this.#problem(
        `says export version ${
          JSON.stringify(value.version)
        }, and this console reads versions ${IMPORT_VERSIONS.join(" and ")}`,
        "import it with the version of the service that exported it",
      );
    }
    this.exportedAt = typeof value.exportedAt === "string"
      ? value.exportedAt
      : null;
  }

  #parse(text: string): Record<string, unknown> {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw this.#problem("is not valid JSON");
    }
    if (!isObject(value)) throw this.#problem("is not a JSON object");
    return value;
  }

  /** The file's lines, without line ends; sets the current line number. */
  async *#lines(): AsyncGenerator<string> {
    const decoder = new TextDecoder("utf-8", { fatal: true });
    const buffer = new Uint8Array(64 * 1024);
    let rest = "";
    for (;;) {
      const n = await this.#handle.read(buffer);
      let text: string;
      try {
        text = decoder.decode(n === null ? undefined : buffer.subarray(0, n), {
          stream: n !== null,
        });
      } catch {
        this.#line++;
        throw this.#problem(
          "is not UTF-8 text",
          'give a file written by "keys export"',
        );
      }
      const parts = (rest + text).split("\n");
      rest = parts.pop()!;
      // The last line may lack its newline; the empty piece after a final one is no line.
      if (n === null && rest !== "") parts.push(rest);
      for (const part of parts) {
        this.#line++;
        yield part.endsWith("\r") ? part.slice(0, -1) : part;
      }
      if (n === null) return;
      if (rest.length > MAX_LINE_CHARS) {
        this.#line++;
        throw this.#problem(
          "is longer than 1 MiB, which no line of an export is",
          'give a file written by "keys export"',
        );
      }
    }
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
