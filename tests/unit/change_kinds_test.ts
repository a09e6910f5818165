/**
 * What the compiler holds every change to (lib/store/change.ts): each line
 * marked `@ts-expect-error` must stay an error, so `deno check tests/` fails
 * the day a change can skip its wait or pass for the other kind.
 */

import assert from "node:assert/strict";
import type { ChangeDraft } from "../../lib/store/backend.ts";
import { Committed, NO_WAIT } from "../../lib/store/change.ts";
import { exposeKey, revokeKey } from "../../lib/store/changes.ts";

/** Never called: type-checked only. */
function _neverRun(
  quiet: ChangeDraft<"usage">,
  authenticating: ChangeDraft<"authentication">,
) {
  // @ts-expect-error A revocation cannot run as a usage note.
  revokeKey(quiet, 1, { actor: "x" });
  // @ts-expect-error A key seen in a URL is not an authentication change.
  exposeKey(authenticating, 1, { actor: "x", from: "192.0.2.1" });
  // @ts-expect-error A usage note cannot write a line the change feed carries.
  quiet.audit({ action: "revoke", keyId: 1, actor: "x", detail: null });
  const network = {
    action: "network",
    keyId: 1,
    actor: "x",
    detail: null,
  } as const;
  // @ts-expect-error Nor an authentication change one the feed leaves out.
  authenticating.audit(network);
  const revoked = new Committed(
    { name: "revoke", alters: "authentication" },
    1n,
    true,
  );
  // @ts-expect-error An authentication change's result is only settled.
  revoked.quiet();
  // @ts-expect-error A change is declared under a name of its own kind.
  new Committed({ name: "revoke", alters: "usage" }, 1n, true);
}

Deno.test("an authentication change's result is reached through its settlement, a usage note's at once", async () => {
  const revoked = new Committed(
    { name: "revoke", alters: "authentication" },
    7n,
    "done",
  );
  const seen: bigint[] = [];
  assert.equal(
    await revoked.settle((change) => {
      seen.push(change.revision);
      return NO_WAIT(change);
    }),
    "done",
  );
  assert.deepEqual(seen, [7n]);
  const exposed = new Committed(
    { name: "markExposed", alters: "usage" },
    8n,
    true,
  );
  assert.equal(exposed.quiet(), true);
});
