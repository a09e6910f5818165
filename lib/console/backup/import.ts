/**
 * `keys import`: refuses a file cut short or not an export, and a non-empty store.
 *
 * @module
 */

import { describeStoreError } from "../store_errors.ts";
import { ImportStateError, StoreInputError } from "../../store/errors.ts";
import type {
  AuditEntry,
  ExportItem,
  KeyRecord,
  KeyStore,
} from "../../store/types.ts";
import { STDIO } from "../command.ts";
import { ConsoleError } from "../errors.ts";
import {
  BackupSummary,
  counted,
  EXPORT_FORMAT,
  EXPORT_VERSION,
  fileProblem,
  onInterruption,
  Progress,
} from "./_shared.ts";

/** Feeds an export file into `importAll()` line by line; problems name their line. */
export async function importFrom(
  store: KeyStore,
  file: string,
  options: { actor: string },
): Promise<BackupSummary> {
  if (file === STDIO) {
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
      throw new ConsoleError(
        `${file} does not exist; give the path of a file written by "keys export", such as /var/backups/keys.jsonl`,
        { code: "file_not_found" },
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
  // A signal fails the import at its next read, and the store removes what
  // a failed import wrote: only a kill leaves it for "keys import --abort".
  // Only the first counts: Ctrl-C reaches the console from its launcher too.
  const interrupt = new AbortController();
  using _guard = onInterruption((code) =>
    interrupt.abort(new Interrupted(code))
  );
  const reader = new ExportReader(file, handle, interrupt.signal);
  try {
    const counts = await store.importAll(reader.items(), options);
    return {
      file,
      keys: counts.keys,
      audit: counts.audit,
      exportedAt: reader.exportedAt,
    };
  } catch (error) {
    if (error instanceof Interrupted) {
      console.error(
        `Import interrupted; what it had written was removed and the store is empty again, as before it; run "keys import FILE" to import again`,
      );
      Deno.exit(error.exitCode);
    }
    throw reader.locate(error);
  }
}

/** A file that is not a complete, well-formed export. */
function invalid(message: string): ConsoleError {
  return new ConsoleError(message, { code: "file_invalid" });
}

/** A signal that ended the import, with the exit code the shell gives it. */
class Interrupted extends Error {
  override name = "Interrupted";
  constructor(readonly exitCode: number) {
    super("The import was interrupted");
  }
}

class ExportReader {
  /** The line being handled; 0 before the first. */
  #line = 0;
  #done = false;
  exportedAt: string | null = null;

  constructor(
    private readonly file: string,
    private readonly handle: {
      read(buffer: Uint8Array): Promise<number | null>;
    },
    private readonly signal: AbortSignal,
  ) {}

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
      return invalid(
        `Line ${this.#line} of ${this.file}: ${message}`,
      );
    }
    return error;
  }

  #problem(what: string, fix = "fix the line or export again"): ConsoleError {
    return invalid(
      `Line ${this.#line} of ${this.file} ${what}; ${fix}`,
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
      throw invalid(
        `${this.file} is empty; give a file written by "keys export"`,
      );
    }
    if (end === null) {
      throw invalid(
        `${this.file} ends at line ${this.#line} without its end line, so it was cut short; copy it again or export again`,
      );
    }
    if (end.keys !== seen.keys || end.audit !== seen.audit) {
      throw invalid(
        `The end line of ${this.file} counts ${
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
    if (value.version !== EXPORT_VERSION) {
      throw this.#problem(
        `says export version ${
          JSON.stringify(value.version)
        }, and this console reads version ${EXPORT_VERSION}`,
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

  /**
   * The next chunk of the file, or the signal's reason as soon as it is
   * aborted: a pipe may hold the read for ever.
   */
  #read(buffer: Uint8Array): Promise<number | null> {
    const signal = this.signal;
    signal.throwIfAborted();
    return new Promise((resolve, reject) => {
      const stop = () => reject(signal.reason);
      signal.addEventListener("abort", stop, { once: true });
      this.handle.read(buffer).then(resolve, reject).finally(() =>
        signal.removeEventListener("abort", stop)
      );
    });
  }

  /** The file's lines, without line ends; sets the current line number. */
  async *#lines(): AsyncGenerator<string> {
    const decoder = new TextDecoder("utf-8", { fatal: true });
    const buffer = new Uint8Array(64 * 1024);
    let rest = "";
    for (;;) {
      const n = await this.#read(buffer);
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
      // No line of an export comes near 1 MiB.
      if (rest.length > 1024 * 1024) {
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
