/**
 * `keys export` and `keys import`, the console's side; the format is in lib/console/backup/.
 *
 * @module
 */

import { counted, exportTo, importFrom } from "./backup/mod.ts";
import { jsonText, report } from "./_output.ts";
import { type Command, FILE_ARGUMENT, STDIO } from "./command.ts";
import { ConsoleError } from "./errors.ts";
import {
  IMPORTED_KEYS,
  inStore,
  storeField,
  warnWithoutServer,
} from "./_store.ts";

/** The --help lines both commands share. */
const FILE_NOTES = [
  "",
  "The keys task may read or write FILE (export: its folder) and nothing else",
  "besides the store. The file holds every key record (hashes and e-mail",
  "addresses, never keys) and the audit log, one JSON value a line: keep it as",
  "private as the store.",
];

export const exportCommand: Command = {
  summary: "back up every key record and the audit log to a new FILE",
  usage: "export FILE",
  options: {},
  positionals: [1, 1, FILE_ARGUMENT],
  notes: [
    ...FILE_NOTES,
    "An existing FILE is never overwritten, and the file appears under its",
    'name only once complete. Restore it with "keys import FILE".',
    "",
    "FILE - writes the export to stdout, to pipe it elsewhere:",
    // The file on the other host holds every key's hash: 0600, as here.
    "  deno task -q keys export - | ssh backup-host 'umask 077; cat > keys.jsonl'",
    "If keys change meanwhile it stops without the end line, so that an import",
    "refuses what was written, and exits 1.",
  ],
  // An empty FILE is refused as a usage error; Deno's flags cannot name it.
  files: ([file]) => file === STDIO || file === "" ? {} : { write: [file] },
  async run({ store, positionals, json, out, actor }) {
    if (positionals[0] === STDIO && json) {
      throw new ConsoleError(
        "export - writes the export itself to stdout; leave out --json",
        { code: "options_conflict" },
      );
    }
    const summary = await exportTo(store, positionals[0], { actor });
    if (json) out.line(JSON.stringify(summary));
    console.error(
      `Exported ${counted(summary)} to ${summary.file}. ` +
        "It holds hashes and e-mail addresses, not keys: keep it as private as the store.",
    );
  },
};

export const importCommand: Command = {
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
    "",
    "FILE - reads the export from stdin:",
    "  deno task -q keys import - < /var/backups/keys.jsonl",
  ],
  files: ([file]) =>
    file === undefined || file === STDIO || file === "" ? {} : { read: [file] },
  async run(ctx) {
    const { store, values, positionals, json, out, actor } = ctx;
    if (values.abort === true) {
      if (positionals.length > 0) {
        throw new ConsoleError(
          'import --abort takes no FILE; run "keys import FILE" afterwards',
          { code: "argument_extra" },
        );
      }
      const aborted = await store.abortImport({ actor });
      if (json) out.line(jsonText({ aborted, ...storeField(ctx) }));
      report(
        aborted
          ? `Aborted the unfinished import ${
            inStore(ctx)
          }; the store is empty again. Run "keys import FILE" to import again`
          : `No import was unfinished ${inStore(ctx)}; nothing changed`,
      );
      return;
    }
    if (positionals.length === 0 || positionals[0] === "") {
      throw new ConsoleError(
        `import needs ${FILE_ARGUMENT}; see "keys import --help"`,
        { code: "argument_missing" },
      );
    }
    const summary = await importFrom(store, positionals[0], { actor });
    if (json) out.line(jsonText({ ...summary, ...storeField(ctx) }));
    report(
      `Imported ${counted(summary)} ${
        inStore(ctx, "into")
      } from ${summary.file}` +
        (summary.exportedAt ? `, exported at ${summary.exportedAt}` : ""),
    );
    await warnWithoutServer(ctx, IMPORTED_KEYS);
  },
};
