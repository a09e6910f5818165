/**
 * The console around keys' lifetimes, where an administrator can be misled:
 * revoking a key whose predecessors are still in a rotation's overlap,
 * rotating a key already in one, and lifetimes that no date can hold.
 */

import assert from "node:assert/strict";
import { createKey, keys, tempDir } from "../support/processes.ts";

/** The audit log's length: proof that a refused command changed nothing. */
async function changes(cwd: string): Promise<number> {
  const result = await keys(cwd, ["audit", "--json"]);
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout).length;
}

async function status(cwd: string, id: number): Promise<string> {
  const shown = await keys(cwd, ["show", String(id), "--json"]);
  assert.equal(shown.code, 0, shown.stderr);
  return JSON.parse(shown.stdout).status;
}

Deno.test("revoking a key by name during a rotation's overlap names the older key that still works and how to revoke it", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin-erp");
  for (let i = 0; i < 2; i++) {
    const rotated = await keys(dir.path, [
      "rotate",
      "berlin-erp",
      "--overlap",
      "1h",
      "--yes",
      "--json",
    ]);
    assert.equal(rotated.code, 0, rotated.stderr);
  }
  // The second rotation retired key 1 (a line keeps at most two keys
  // working); key 2 is in its overlap, and the name is key 3's.
  assert.equal(await status(dir.path, 1), "revoked");
  const revoked = await keys(dir.path, [
    "revoke",
    "berlin-erp",
    "--reason",
    "leaked",
    "--yes",
  ]);
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.equal(await status(dir.path, 3), "revoked");
  // The older key still works: the administrator must be told, with the fix.
  assert.equal(await status(dir.path, 2), "valid");
  assert.match(revoked.stderr, /key 2 "berlin-erp"/i);
  assert.doesNotMatch(revoked.stderr, /key 1 "berlin-erp"/i);
  assert.match(revoked.stderr, /still works? until/);
  assert.match(revoked.stderr, /keys revoke 2\b/);
});

Deno.test("revoking a key with no predecessor in an overlap says nothing about other keys", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin-erp");
  await createKey(dir.path, "hamburg-erp");
  const revoked = await keys(dir.path, ["revoke", "berlin-erp", "--yes"]);
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.doesNotMatch(revoked.stderr, /still works/);
});

Deno.test("rotating a key already in an overlap is refused before any key is written to stdout", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin-erp");
  const first = await keys(dir.path, [
    "rotate",
    "berlin-erp",
    "--overlap",
    "1h",
    "--yes",
  ]);
  assert.equal(first.code, 0, first.stderr);
  const before = await changes(dir.path);
  const again = await keys(dir.path, [
    "rotate",
    "1",
    "--overlap",
    "1h",
    "--yes",
  ]);
  assert.equal(again.code, 1);
  assert.equal(again.stdout, "", "no key that does not work is written");
  assert.match(again.stderr, /rotate key 2 instead/);
  assert.equal(await changes(dir.path), before);
});

Deno.test("lifetimes and overlaps beyond the last time a date can hold are usage errors naming the option, and change nothing", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin-erp");
  const before = await changes(dir.path);
  const cases: [string[], Record<string, string>, RegExp][] = [
    [
      [
        "create",
        "--name",
        "x",
        "--email",
        "x@example.com",
        "--expires-in",
        "999999999d",
      ],
      {},
      /^--expires-in /,
    ],
    [
      ["rotate", "berlin-erp", "--overlap", "999999999d", "--yes"],
      {},
      /^--overlap /,
    ],
  ];
  for (const [args, env, message] of cases) {
    const result = await keys(dir.path, args, env);
    assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
    assert.equal(result.stdout, "");
    assert.match(result.stderr, message);
    assert.doesNotMatch(result.stderr, /Invalid time value/);
  }
  // A maximum no date can hold is refused as the setting it is, as a
  // KEY_MAX_LIFETIME that is no duration is (exit 1).
  const huge = await keys(dir.path, [
    "create",
    "--name",
    "x",
    "--email",
    "x@example.com",
  ], { KEY_MAX_LIFETIME: "999999999d" });
  assert.equal(huge.code, 1, huge.stderr);
  assert.match(huge.stderr, /KEY_MAX_LIFETIME/);
  assert.doesNotMatch(huge.stderr, /Invalid time value/);
  assert.equal(await changes(dir.path), before);
});

Deno.test("--expires-at refuses a calendar date that does not exist instead of moving it to the next month", async () => {
  using dir = tempDir();
  const result = await keys(dir.path, [
    "create",
    "--name",
    "x",
    "--email",
    "x@example.com",
    "--expires-at",
    "2030-02-31T00:00:00Z",
  ]);
  assert.equal(result.code, 2, result.stderr);
  assert.equal(result.stdout, "");
  assert.match(result.stderr, /^--expires-at /);
});
