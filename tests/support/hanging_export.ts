/**
 * An export into FILE from a store that stops answering after the header:
 * for the test that interrupts it.
 *
 * @module
 */

import { exportTo } from "../../lib/console/backup/mod.ts";
import type { KeyStore } from "../../lib/store/types.ts";

const store = {
  revision: () => Promise.resolve(1n),
  async *exportAll() {
    // Never answers, as a store that hangs mid-export.
    await new Promise(() => {});
    yield* [];
  },
} as unknown as KeyStore;

// Keeps the process alive while the export waits, as a real store's socket would.
setInterval(() => {}, 1000);
await exportTo(store, Deno.args[0], { actor: "test" });
