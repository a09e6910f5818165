/**
 * The console (admin.ts's `main`) with a shorter PostgreSQL time limit than
 * its 15 s default, for tests that stall a change and need the console to
 * give up on it soon: `deno run -A tests/support/console_with_limits.ts
 * TIMEOUT_MS COMMAND ARGS...`. Any other store opens as the console opens it.
 *
 * @module
 */

import { main } from "../../admin.ts";
import { openStore } from "../../lib/store/open.ts";
import { openPostgresStore } from "../../lib/store/postgres/store.ts";

if (import.meta.main) {
  const [timeoutMs, ...args] = Deno.args;
  Deno.exit(
    await main(args, {
      open: (location) =>
        location.kind === "postgres"
          ? openPostgresStore(location.url, { timeoutMs: Number(timeoutMs) })
          : openStore(location),
    }),
  );
}
