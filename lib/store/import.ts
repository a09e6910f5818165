/**
 * An import and its abort, written once over any backend: every item is
 * checked (`_import_check.ts`), numbered and handed on in batches to the
 * backend's staged import, which no reader sees until it is published with
 * its own audit line. A backend only stages, publishes and discards
 * (lib/store/backend.ts).
 *
 * @module
 */

import type { ImportBatch, StoreBackend } from "./backend.ts";
import { ImportChecker } from "./_import_check.ts";
import { type ChangeKind, Committed } from "./change.ts";
import { ImportItemError } from "./errors.ts";
import type { ChangeOptions, ExportItem } from "./types.ts";

/** Items per batch handed to the backend: a statement's or a few commits' worth. */
const BATCH = 500;

const IMPORT: ChangeKind<"authentication"> = {
  name: "importAll",
  alters: "authentication",
};
const ABORT: ChangeKind<"authentication"> = {
  name: "abortImport",
  alters: "authentication",
};

/**
 * Restores checked `items` into the empty store behind `backend` and audits
 * the import, with nothing visible to a reader until it is whole.
 */
export function importInto(
  backend: StoreBackend,
  items: AsyncIterable<ExportItem>,
  options: ChangeOptions,
): Promise<Committed<{ keys: number; audit: number }, "authentication">> {
  return backend.stageImport(options, async (staged) => {
    const checker = new ImportChecker();
    const counts = { keys: 0, audit: 0 };
    let batch: ImportBatch = { keys: [], audit: [] };
    for await (const item of items) {
      if (item.type === "key") {
        batch.keys.push(checker.record(item.record));
        counts.keys++;
      } else if (item.type === "audit") {
        batch.audit.push({
          seq: ++counts.audit,
          entry: checker.audit(item.entry),
        });
      } else {
        throw new ImportItemError((item as { type: unknown }).type);
      }
      if (batch.keys.length + batch.audit.length >= BATCH) {
        await staged.write(batch);
        batch = { keys: [], audit: [] };
      }
    }
    checker.finish();
    await staged.write(batch);
    const revision = await staged.publish({
      at: new Date().toISOString(),
      action: "import",
      keyId: 0,
      actor: options.actor,
      detail: `${counts.keys} keys and ${counts.audit} audit lines`,
    }, { maxId: checker.maxId, above: BigInt(counts.audit) });
    return new Committed(IMPORT, revision, counts);
  });
}

/** Ends an unfinished import, emptying the store; false when there was none. */
export async function abortImportIn(
  backend: StoreBackend,
  options: ChangeOptions,
): Promise<Committed<boolean, "authentication">> {
  const { revision, discarded } = await backend.discardImport(options);
  return new Committed(ABORT, revision, discarded);
}
