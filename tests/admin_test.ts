/** The admin console as an administrator meets it: every command, every error path. */

import assert from "node:assert/strict";
import { createKey, keys, tempDir } from "./_helpers.ts";

/** The audit log's length: proof that a refused command changed nothing. */
async function changes(cwd: string): Promise<number> {
  const result = await keys(cwd, ["audit", "--json"]);
  return result.code === 0 ? JSON.parse(result.stdout).length : 0;
}

Deno.test("--help on the console and on every command prints usage and exits 0", async () => {
  using dir = tempDir();
  for (const args of [[], ["--help"], ["help"]]) {
    const result = await keys(dir.path, args);
    assert.equal(result.code, 0);
    assert.match(result.stdout, /Usage: deno task keys <command>/);
    for (
      const command of ["create", "list", "show", "revoke", "rotate", "audit"]
    ) {
      assert.match(result.stdout, new RegExp(`\\n  ${command}\\b`));
    }
  }
  for (
    const command of ["create", "list", "show", "revoke", "rotate", "audit"]
  ) {
    const result = await keys(dir.path, [command, "--help"]);
    assert.equal(result.code, 0, command);
    assert.match(result.stdout, new RegExp(`Usage: deno task keys ${command}`));
    assert.match(result.stdout, /--json/);
  }
});

Deno.test("create --json prints one JSON object with the key; list, show and revoke --json print no secret", async () => {
  using dir = tempDir();
  const created = await keys(dir.path, [
    "create",
    "--name",
    "berlin",
    "--email",
    "ops@example.com",
    "--json",
  ]);
  assert.equal(created.code, 0);
  const record = JSON.parse(created.stdout);
  assert.deepEqual(
    [record.id, record.name, record.email, record.status],
    [1, "berlin", "ops@example.com", "valid"],
  );
  assert.match(record.key, /^isk_/);
  assert.ok(!("hash" in record));
  assert.match(created.stderr, /shown once/);
  assert.ok(!created.stderr.includes(record.key));

  const list = await keys(dir.path, ["list", "--json"]);
  const listed = JSON.parse(list.stdout);
  assert.equal(listed.length, 1);
  assert.ok(!("key" in listed[0]) && !("hash" in listed[0]));
  const show = JSON.parse(
    (await keys(dir.path, ["show", "berlin", "--json"])).stdout,
  );
  assert.equal(show.id, 1);
  const revoke = await keys(dir.path, [
    "revoke",
    "1",
    "--reason",
    "left",
    "--json",
  ]);
  assert.equal(revoke.code, 0);
  assert.deepEqual([
    JSON.parse(revoke.stdout).status,
    JSON.parse(revoke.stdout).revokedReason,
  ], ["revoked", "left"]);
  for (const out of [list.stdout, revoke.stdout]) {
    assert.ok(!out.includes(record.key.slice(4)));
  }
});

Deno.test("list shows valid keys in a table and --all adds revoked ones with when and why", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin");
  await createKey(dir.path, "hamburg");
  await keys(dir.path, [
    "revoke",
    "hamburg",
    "--reason",
    "machine decommissioned",
  ]);
  const list = await keys(dir.path, ["list"]);
  assert.match(list.stdout, /^ID\s+NAME\s+EMAIL\s+STATUS\s+CREATED\s+HINT/);
  assert.match(list.stdout, /\n1\s+berlin\s+berlin@example\.com\s+valid/);
  assert.ok(!list.stdout.includes("hamburg"));
  const all = await keys(dir.path, ["list", "--all"]);
  assert.match(all.stdout, /REVOKED\s+REASON/);
  assert.match(all.stdout, /\n2\s+hamburg\s+.*revoked.*machine decommissioned/);
});

Deno.test("rotate revokes the key and prints its replacement with the same name and e-mail", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin", "ops@example.com");
  const rotated = await keys(dir.path, ["rotate", "berlin", "--json"]);
  assert.equal(rotated.code, 0, rotated.stderr);
  const body = JSON.parse(rotated.stdout);
  assert.deepEqual([
    body.id,
    body.name,
    body.email,
    body.replaces.id,
    body.replaces.status,
  ], [
    2,
    "berlin",
    "ops@example.com",
    1,
    "revoked",
  ]);
  assert.match(body.key, /^isk_/);
});

Deno.test("revoking a revoked key says so, changes nothing and exits 0", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin");
  await keys(dir.path, ["revoke", "1"]);
  const before = await changes(dir.path);
  const again = await keys(dir.path, ["revoke", "1", "--reason", "again"]);
  assert.equal(again.code, 0);
  assert.match(again.stderr, /already revoked/);
  assert.equal(await changes(dir.path), before);
});

Deno.test("every wrong command line prints one line, exits 2 and changes nothing", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin");
  const before = await changes(dir.path);
  const wrong: [string[], RegExp][] = [
    [["frobnicate"], /^Unknown command "frobnicate"; the commands are/],
    [["list", "--colour"], /^Unknown option '--colour'/],
    [["create", "--email", "a@example.com"], /^--name is required$/],
    [["create", "--name", "x"], /^--email is required$/],
    [
      ["create", "--name", "x", "--email", "not-an-address"],
      /^--email: Email must be an address/,
    ],
    [
      ["create", "--name", "12", "--email", "a@example.com"],
      /^--name: Name must not be all digits/,
    ],
    [
      ["create", "--name", "x", "--email", "a@example.com", "extra"],
      /^create takes no arguments/,
    ],
    [["create", "--name"], /^Option '--name <value>' argument missing/],
    [["show"], /^show needs KEY/],
    [["revoke"], /^revoke needs KEY/],
    [["show", "1", "2"], /^show takes one KEY/],
  ];
  for (const [args, message] of wrong) {
    const result = await keys(dir.path, args);
    assert.equal(result.code, 2, `${args.join(" ")}: ${result.stderr}`);
    assert.match(result.stderr.trim(), message, args.join(" "));
    assert.equal(result.stderr.trim().split("\n").length, 1, args.join(" "));
    assert.equal(result.stdout, "");
  }
  assert.equal(await changes(dir.path), before);
});

Deno.test("an unknown key, a taken name or a bad store path prints one line, exits 1 and changes nothing", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin");
  const before = await changes(dir.path);
  const failing: [string[], RegExp, Record<string, string>?][] = [
    [["show", "99"], /^Key 99 does not exist; run "keys list --all"/],
    [["revoke", "99"], /^Key 99 does not exist/],
    [["rotate", "99"], /^Key 99 does not exist/],
    [["show", "nobody"], /^No valid key is named "nobody"/],
    [["audit", "nobody"], /^No valid key is named "nobody"/],
    [
      ["create", "--name", "BERLIN", "--email", "b@example.com"],
      /^Name "BERLIN" is already used by valid key 1/,
    ],
    [["list"], /^DENO_KV_PATH must be a file path, ":memory:" or a URL/, {
      DENO_KV_PATH: "data/",
    }],
    [["list"], /^The store is outside what this task may read and write/, {
      DENO_KV_PATH: "/tmp/elsewhere.db",
    }],
  ];
  for (const [args, message, env] of failing) {
    const result = await keys(dir.path, args, env);
    assert.equal(result.code, 1, `${args.join(" ")}: ${result.stderr}`);
    assert.match(result.stderr.trim(), message, args.join(" "));
    assert.equal(result.stderr.trim().split("\n").length, 1, args.join(" "));
    assert.equal(result.stdout, "");
  }
  assert.equal(await changes(dir.path), before);
});

Deno.test("audit shows who changed what and when", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin", "ops@example.com", { USER: "alice" });
  await keys(dir.path, ["revoke", "berlin", "--reason", "left"], {
    USER: "bob",
  });
  const log = JSON.parse((await keys(dir.path, ["audit", "--json"])).stdout);
  assert.deepEqual(log.map((e: { action: string }) => e.action), [
    "create",
    "revoke",
  ]);
  assert.match(log[0].actor, /^alice@/);
  assert.match(log[1].actor, /^bob@/);
  assert.equal(log[1].detail, "left");
  const text = await keys(dir.path, ["audit", "1"]);
  assert.match(text.stdout, /create\s+1\s+alice@/);
});
