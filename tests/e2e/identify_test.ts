/**
 * A key never goes back out of the console: a key-shaped argument is
 * refused without being echoed, and `keys identify` names a leaked value's
 * key from stdin or a file without printing the value.
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import {
  createKey,
  keys,
  type RunResult,
  taskCommand,
  tempDir,
} from "../support/processes.ts";

/** Asserts that no part of the key long enough to matter is in the output. */
function assertNoKey(result: RunResult, key: string): void {
  const output = result.stdout + result.stderr;
  for (const part of [key, key.slice(4), key.slice(4, 20), key.slice(-16)]) {
    assert.ok(!output.includes(part), `the output holds the key: ${output}`);
  }
}

/** `deno task keys ARGS` with `input` piped to stdin. */
async function keysWithInput(
  cwd: string,
  args: string[],
  input: string,
): Promise<RunResult> {
  const child = taskCommand("keys", { cwd, args, stdin: "piped" }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(input));
  await writer.close();
  const out = await child.output();
  const decoder = new TextDecoder();
  return {
    code: out.code,
    stdout: decoder.decode(out.stdout),
    stderr: decoder.decode(out.stderr),
  };
}

Deno.test("show, revoke and any other command refuse a key-shaped argument with exit 2 and never print it", async () => {
  using dir = tempDir();
  const made = await createKey(dir.path, "berlin-erp");
  const invented = generateApiKey().key;
  const attempts = [
    ["show", made.key],
    ["revoke", made.key, "--yes"],
    ["revoke", made.key.slice(4), "--yes"], // without its prefix
    ["show", made.key.toUpperCase()],
    ["audit", invented],
    [made.key], // as a command
    ["show", `--${made.key}`], // as an option
    ["show", "1", made.key], // as an extra argument
  ];
  for (const args of attempts) {
    const result = await keys(dir.path, args);
    assert.equal(result.code, 2, args.join(" "));
    assert.match(result.stderr, /looks like an API key/);
    assert.match(result.stderr, /keys identify/);
    assertNoKey(result, args.find((a) => a.length > 30)!);
  }
  const shown = await keys(dir.path, ["show", String(made.id), "--json"]);
  assert.equal(JSON.parse(shown.stdout).status, "valid", "nothing was revoked");
});

Deno.test("identify reads the value from stdin and never prints it", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin-erp");
  const made = await createKey(dir.path, "paris-crm", "ops@paris.example");
  const text = await keysWithInput(dir.path, ["identify"], `${made.key}\n`);
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, new RegExp(`key ${made.id} "paris-crm"`));
  assert.match(text.stdout, /status\s+valid/);
  assert.match(text.stdout, /ops@paris\.example/);
  assertNoKey(text, made.key);

  // Pasted with its surroundings, as it leaked: the header line.
  const json = await keysWithInput(
    dir.path,
    ["identify", "--json"],
    `X-API-Key: ${made.key}\r\n`,
  );
  assert.equal(json.code, 0, json.stderr);
  const facts = JSON.parse(json.stdout);
  assert.deepEqual([facts.id, facts.name, facts.status], [
    made.id,
    "paris-crm",
    "valid",
  ]);
  assertNoKey(json, made.key);

  await keys(dir.path, ["revoke", String(made.id), "--yes"]);
  const revoked = await keysWithInput(dir.path, ["identify"], made.key);
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.match(revoked.stdout, /status\s+revoked/);
  assertNoKey(revoked, made.key);
});

Deno.test("identify reads the value from a FILE, and says so without echoing it when no key has it", async () => {
  using dir = tempDir();
  const made = await createKey(dir.path, "berlin-erp");
  await Deno.writeTextFile(`${dir.path}/leaked.txt`, `${made.key}\n`);
  const found = await keys(dir.path, ["identify", "./leaked.txt"]);
  assert.equal(found.code, 0, found.stderr);
  assert.match(found.stdout, new RegExp(`key ${made.id} "berlin-erp"`));
  assertNoKey(found, made.key);

  const invented = generateApiKey().key;
  const unknown = await keysWithInput(dir.path, ["identify"], invented);
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /^No key in this store has that value/);
  assertNoKey(unknown, invented);

  const mangled = `${made.key.slice(0, -1)}!`;
  const wrong = await keysWithInput(dir.path, ["identify"], mangled);
  assert.equal(wrong.code, 1);
  assert.match(wrong.stderr, /not a well-formed API key/);
  assertNoKey(wrong, made.key);
});
