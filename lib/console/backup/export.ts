/**
 * Backup of a store as a file: `keys export`, in the format mod.ts describes.
 *
 * @module
 */

import { folderOf } from "../../server/permissions.ts";
import type { KeyStore } from "../../store/types.ts";
import { pathExists } from "../../util/exists.ts";
import { writeAll } from "../../util/write_all.ts";
import { STDIO } from "../command.ts";
import { ConsoleError } from "../errors.ts";
import {
  BackupSummary,
  EXPORT_FORMAT,
  EXPORT_VERSION,
  fileProblem,
  onInterruption,
  Progress,
} from "./_shared.ts";

/** Exports begun afresh because keys changed meanwhile, before giving up. */
const EXPORT_ATTEMPTS = 3;

/**
 * Writes to a hidden temporary file beside FILE, renamed only when complete on
 * disk: a crash never leaves half a backup under the name admins restore from.
 * Keys, then audit, are read in two passes; if the store's revision (moved by
 * every change but last-used times) changed in between, the export restarts.
 */
export async function exportTo(
  store: KeyStore,
  file: string,
  options: { actor: string },
): Promise<BackupSummary> {
  if (file === STDIO) return await exportToStdout(store, options);
  // The folder as the keys task grants it, so a backslash is part of a name.
  const folder = folderOf(file);
  const base = file.slice(file.lastIndexOf("/") + 1);
  if (base === "" || base === "." || base === "..") {
    throw new ConsoleError(
      `FILE must name a file, not ${
        JSON.stringify(file)
      }; use a path such as /var/backups/keys.jsonl`,
      { code: "file_not_found" },
    );
  }
  for (let attempt = 1;; attempt++) {
    const temp = `${folder}/.${base}.${crypto.randomUUID().slice(0, 8)}.tmp`;
    // The unfinished file holds hashes and e-mail addresses: Ctrl-C, a
    // SIGTERM or a closed terminal must not leave it behind.
    using _guard = onInterruption((code) => {
      try {
        Deno.removeSync(temp);
      } catch {
        // Not created yet, or published and removed already.
      }
      console.error("Export interrupted; the unfinished file was removed");
      Deno.exit(code);
    });
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
      throw new ConsoleError(
        `Keys changed during each of ${EXPORT_ATTEMPTS} attempts to export; export again when no one is changing keys`,
        { code: "export_changed" },
      );
    }
    console.error("Keys changed during the export; starting again");
  }
}

/**
 * The export streamed on stdout, which cannot restart: if keys change meanwhile
 * it stops before the end line an import requires, and says so.
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
    throw new ConsoleError(
      "Keys changed during the export, so it stopped before its end line and an import will refuse what was written; export again when no one is changing keys",
      { code: "export_changed" },
    );
  }
  await writer.end(summary);
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
      throw new ConsoleError(
        `The folder ${folder} of FILE does not exist; create it or use a path such as /var/backups/keys.jsonl`,
        { code: "file_not_found" },
      );
    }
    throw fileProblem(error, file, "written");
  }
  using _ = handle;
  try {
    const writer = new LineWriter(handle);
    const summary = await writeLines(store, writer, target);
    await writer.end(summary);
    // The bytes reach the disk before the name does.
    await handle.sync();
    return summary;
  } catch (error) {
    await removeQuietly(temp);
    throw fileProblem(error, file, "written");
  }
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

/** Batches lines into few writes. */
class LineWriter {
  #chunks: string[] = [];
  #size = 0;

  constructor(
    private readonly file: { write(bytes: Uint8Array): Promise<number> },
  ) {}

  async line(text: string): Promise<void> {
    this.#chunks.push(text, "\n");
    this.#size += text.length + 1;
    if (this.#size >= 256 * 1024) await this.flush();
  }

  /** The end line, with the counts an import checks, and a flush. */
  async end(counts: { keys: number; audit: number }): Promise<void> {
    await this.line(
      JSON.stringify({ type: "end", keys: counts.keys, audit: counts.audit }),
    );
    await this.flush();
  }

  async flush(): Promise<void> {
    const text = this.#chunks.join("");
    this.#chunks = [];
    this.#size = 0;
    await writeAll(this.file, new TextEncoder().encode(text));
  }
}

async function removeQuietly(path: string): Promise<void> {
  try {
    await Deno.remove(path);
  } catch {
    // Already gone, or unremovable: the error that matters is the caller's.
  }
}

function alreadyThere(file: string): ConsoleError {
  return new ConsoleError(
    `${file} already exists, and an export never overwrites a file; choose a new name or remove it first`,
    { code: "file_exists" },
  );
}
