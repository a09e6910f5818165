/** The admin console as an administrator meets it: every command, every error path. */

import assert from "node:assert/strict";
import { newRecord } from "../../lib/store/records.ts";
import {
  createKey,
  keys,
  type RunResult,
  taskArgs,
  taskCommand,
  tempDir,
} from "../support/processes.ts";
import { relativeTime, stripAnsi } from "../../lib/console/_format.ts";
import { type Column, fitColumns, rowLine } from "../../lib/console/_table.ts";
import { COMMANDS as REGISTRY } from "../../lib/console/commands.ts";

const COMMANDS = [
  "create",
  "list",
  "show",
  "revoke",
  "rotate",
  "audit",
  "export",
  "import",
];

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
    assert.match(result.stdout, /Usage: deno task -q keys <command>/);
    for (const command of COMMANDS) {
      assert.match(result.stdout, new RegExp(`\\n  ${command}\\b`));
    }
  }
  for (const command of COMMANDS) {
    const result = await keys(dir.path, [command, "--help"]);
    assert.equal(result.code, 0, command);
    assert.match(
      result.stdout,
      new RegExp(`Usage: deno task -q keys ${command}`),
    );
    assert.match(result.stdout, /--json/);
  }
});

Deno.test("keys help COMMAND prints that command's help, as keys COMMAND --help does; an unknown or second command is a usage error", async () => {
  using dir = tempDir();
  for (const command of ["create", "update"]) {
    const asked = await keys(dir.path, ["help", command]);
    const flag = await keys(dir.path, [command, "--help"]);
    assert.equal(asked.code, 0, asked.stderr);
    assert.match(
      asked.stdout,
      new RegExp(`Usage: deno task -q keys ${command}`),
    );
    assert.equal(asked.stdout, flag.stdout);
  }
  const json = await keys(dir.path, ["help", "create", "--json"]);
  assert.equal(json.code, 0, json.stderr);
  assert.match(JSON.parse(json.stdout).help, /keys create/);
  const unknown = await keys(dir.path, ["help", "frobnicate", "--json"]);
  assert.equal(unknown.code, 2);
  assert.equal(JSON.parse(unknown.stdout).error.code, "unknown_command");
  const two = await keys(dir.path, ["help", "create", "list", "--json"]);
  assert.equal(two.code, 2);
  assert.equal(JSON.parse(two.stdout).error.code, "argument_extra");
});

Deno.test("keys --help lists every command of the registry and names every variable the keys task may read", async () => {
  using dir = tempDir();
  const result = await keys(dir.path, ["--help"]);
  assert.equal(result.code, 0);
  for (const [name, command] of Object.entries(REGISTRY)) {
    assert.ok(
      result.stdout.includes(`\n  ${command.usage} `),
      `keys --help leaves out ${name}`,
    );
  }
  const allowEnv = taskArgs("keys").find((arg) =>
    arg.startsWith("--allow-env=")
  );
  assert.ok(allowEnv, "the keys task names the variables it may read");
  const variables = allowEnv.slice("--allow-env=".length).split(",");
  assert.ok(variables.includes("DATABASE_URL"));
  for (const variable of variables) {
    assert.match(
      result.stdout,
      new RegExp(`\\b${variable}\\b`),
      `keys --help does not name ${variable}`,
    );
  }
});

Deno.test("keys --version prints the release deno.json carries, in one line, with no store; keys --help names it", async () => {
  using dir = tempDir();
  const release = JSON.parse(
    Deno.readTextFileSync(new URL("../../deno.json", import.meta.url)),
  ).version;
  const result = await keys(dir.path, ["--version"]);
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, `integration-service ${release}\n`);
  assert.deepEqual([...Deno.readDirSync(dir.path)], [], "no store opened");
  assert.match((await keys(dir.path, ["--help"])).stdout, /keys --version/);
  const extra = await keys(dir.path, ["--version", "--json"]);
  assert.equal(extra.code, 2);
  assert.equal(JSON.parse(extra.stdout).error.code, "argument_extra");
});

Deno.test("keys --help does not confine FILE to ./data, as the keys task grants the FILE a command names", async () => {
  using dir = tempDir();
  const result = await keys(dir.path, ["--help"]);
  assert.equal(result.code, 0);
  assert.doesNotMatch(result.stdout, /FILE must be under \.\/data/);
  assert.match(result.stdout, /FILE may be anywhere/);
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
  assert.match(
    list.stdout,
    /^ID\s+NAME\s+EMAIL\s+STATUS\s+CREATED\s+LAST USED\s+HINT\s+EXPIRES\s+RATE\s+EXPOSED\n/,
  );
  assert.match(
    list.stdout,
    /\n1\s+berlin\s+berlin@example\.com\s+valid\s+just now\s+never\s+isk_…/,
  );
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
    [["create", "--name"], /^--name needs a value; write --name VALUE/],
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

Deno.test("an empty --rate or --allow-from is refused as a value that is none, beside the other option too, with exit 2 and nothing applied", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin");
  const before = await changes(dir.path);
  const create = ["create", "--name", "x", "--email", "x@example.com"];
  const wrong: [string[], string][] = [
    [["update", "berlin", "--allow-from", "any", "--rate", ""], "rate_syntax"],
    [
      ["update", "berlin", "--allow-from", "10.0.0.0/8", "--rate=  "],
      "rate_syntax",
    ],
    [["update", "berlin", "--rate", ""], "rate_syntax"],
    [
      ["update", "berlin", "--rate", "5/min", "--allow-from", ""],
      "invalid_allowFrom",
    ],
    [["update", "berlin", "--allow-from", " "], "invalid_allowFrom"],
    [[...create, "--rate", ""], "rate_syntax"],
    [[...create, "--allow-from", ""], "invalid_allowFrom"],
  ];
  for (const [args, code] of wrong) {
    const said = args.join(" ");
    const human = await keys(dir.path, args);
    assert.equal(human.code, 2, `${said}: ${human.stderr}`);
    assert.match(
      human.stderr,
      code === "rate_syntax" ? /^--rate: / : /^--allow-from: /,
      said,
    );
    assert.equal(human.stderr.trim().split("\n").length, 1, said);
    assert.equal(human.stdout, "", said);
    const json = await keys(dir.path, [...args, "--json"]);
    assert.equal(json.code, 2, `${said} --json: ${json.stderr}`);
    assert.equal(JSON.parse(json.stdout).error.code, code, `${said} --json`);
  }
  assert.equal(await changes(dir.path), before);
  const [key] = JSON.parse((await keys(dir.path, ["list", "--json"])).stdout);
  assert.deepEqual([key.allowFrom, key.rateLimit], [null, null]);
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

Deno.test("audit of a rotated key's new name shows its creation under the old id, and an import names no key", async () => {
  using dir = tempDir();
  const env = { USER: "alice" };
  await createKey(dir.path, "berlin", "ops@example.com", env);
  await createKey(dir.path, "hamburg", "it@example.com", env);
  const rotated = await keys(dir.path, ["rotate", "berlin", "--yes"], env);
  assert.equal(rotated.code, 0, rotated.stderr);
  const byName = await keys(dir.path, ["audit", "berlin"]);
  assert.equal(byName.code, 0, byName.stderr);
  const rows = byName.stdout.trim().split("\n").slice(1);
  assert.deepEqual(rows.map((row) => row.split(/\s+/).slice(2, 4)), [
    ["create", "1"],
    ["rotate", "1"],
  ]);
  assert.match(rows[1], /replaced by key 3$/);
  assert.match(
    byName.stderr,
    /^Key 3 "berlin" is one installation's key with key 1/,
  );
  for (const ref of ["1", "3"]) {
    assert.equal((await keys(dir.path, ["audit", ref])).stdout, byName.stdout);
  }
  const json = JSON.parse(
    (await keys(dir.path, ["audit", "3", "--json"])).stdout,
  );
  assert.deepEqual(json.map((e: { keyId: number }) => e.keyId), [1, 1]);

  const exported = await keys(dir.path, ["export", "./data/b.jsonl"]);
  assert.equal(exported.code, 0, exported.stderr);
  using target = tempDir();
  await Deno.mkdir(`${target.path}/data`, { mode: 0o700 });
  await Deno.copyFile(
    `${dir.path}/data/b.jsonl`,
    `${target.path}/data/b.jsonl`,
  );
  const imported = await keys(target.path, ["import", "./data/b.jsonl"], env);
  assert.equal(imported.code, 0, imported.stderr);
  const after = (await keys(target.path, ["audit", "berlin"])).stdout;
  const importRow = after.split("\n").find((row) => / import /.test(row));
  assert.ok(importRow, after);
  // The actor follows the action at once: the KEY column is empty.
  assert.match(importRow, / import +alice@\S+ +3 keys and 3 audit lines$/);
  const json2 = JSON.parse(
    (await keys(target.path, ["audit", "--json"])).stdout,
  );
  assert.equal(json2.at(-1).action, "import");
  assert.equal(json2.at(-1).keyId, 0, "--json keeps keyId 0 on an import");
});

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

Deno.test("relative times round down to the largest whole unit, and say just now under a minute", () => {
  const now = Date.parse("2026-11-21T12:00:00.000Z");
  const ago = (ms: number) =>
    relativeTime(new Date(now - ms).toISOString(), { now });
  assert.equal(ago(0), "just now");
  assert.equal(ago(59_999), "just now");
  assert.equal(ago(MINUTE), "1 minute ago");
  assert.equal(ago(59 * MINUTE + 59_000), "59 minutes ago");
  assert.equal(ago(HOUR), "1 hour ago");
  assert.equal(ago(DAY - 1), "23 hours ago");
  assert.equal(ago(3 * DAY + 5 * HOUR), "3 days ago");
  assert.equal(ago(45 * DAY), "1 month ago");
  assert.equal(ago(800 * DAY), "2 years ago");
  assert.equal(ago(-2 * MINUTE), "in 2 minutes");
  assert.equal(relativeTime("not a time", { now }), "not a time");
});

Deno.test("fitting columns squeezes the widest towards its minimum before leaving any out", () => {
  const columns: Column<string>[] = [
    { heading: "ID", width: 4, cell: () => "1" },
    { heading: "NAME", width: 20, min: 8, cell: (r) => r },
    { heading: "HINT", width: 10, dropRank: 1, cell: () => "isk_…abcd" },
  ];
  const roomy = fitColumns(columns, 200);
  assert.deepEqual(roomy.columns.map((c) => c.width), [4, 20, 10]);
  const squeezed = fitColumns(columns, 30);
  assert.deepEqual(squeezed.columns.map((c) => c.width), [4, 12, 10]);
  assert.deepEqual(squeezed.dropped, []);
  const narrow = fitColumns(columns, 20);
  assert.deepEqual(narrow.columns.map((c) => c.heading), ["ID", "NAME"]);
  assert.deepEqual(narrow.dropped, ["HINT"]);
  const line = rowLine(narrow.columns, "a very long installation name");
  assert.ok([...line].length <= 20, line);
  assert.match(line, /…$/);
});

/** A complete export holding the given key records, for `keys import`. */
function exportFile(records: Record<string, unknown>[]): string {
  return [
    {
      format: "integration-service-keys",
      version: 3,
      exportedAt: new Date().toISOString(),
    },
    ...records.map((record) => ({ type: "key", record })),
    { type: "end", keys: records.length, audit: 0 },
  ].map((line) => JSON.stringify(line)).join("\n") + "\n";
}

function keyRecord(
  id: number,
  fields: Record<string, unknown> = {},
): Record<string, unknown> {
  const record = newRecord(id, {
    name: `site-${id}`,
    email: `site-${id}@example.com`,
    hash: id.toString(16).padStart(64, "0"),
    hint: "isk_…abcd",
  }, new Date());
  return { ...record, ...fields };
}

/** Fills a fresh store with records whose times lie in the past. */
async function seed(
  cwd: string,
  records: Record<string, unknown>[],
): Promise<void> {
  await Deno.mkdir(`${cwd}/data`, { recursive: true });
  await Deno.writeTextFile(`${cwd}/data/seed.jsonl`, exportFile(records));
  const result = await keys(cwd, ["import", "./data/seed.jsonl"]);
  assert.equal(result.code, 0, result.stderr);
}

/**
 * Three records whose times lie the given spans before `now`, one of each
 * state. Made when a test seeds them, not when the module loads: on a busy
 * machine a test may start a minute or more after that.
 */
function aged(now = Date.now()): Record<string, unknown>[] {
  const ago = (ms: number) => new Date(now - ms).toISOString();
  return [
    keyRecord(1, {
      createdAt: ago(3 * DAY + HOUR),
      lastUsedAt: ago(2 * HOUR + MINUTE),
    }),
    keyRecord(2, {
      createdAt: ago(40 * DAY),
      exposedAt: ago(5 * MINUTE + 10_000),
      exposedFrom: "203.0.113.9",
    }),
    keyRecord(3, {
      status: "revoked",
      createdAt: ago(400 * DAY),
      revokedAt: ago(DAY + HOUR),
      revokedReason: "person left",
    }),
  ];
}

/** A console run with the window in which it read its clock. */
interface Clocked extends RunResult {
  /** Date.now() before the process started and after it exited. */
  from: number;
  to: number;
}

/** `keys ARGS`, bracketed by the times between which it took its "now". */
async function clocked(
  cwd: string,
  run: (cwd: string) => Promise<RunResult>,
): Promise<Clocked> {
  const from = Date.now();
  const result = await run(cwd);
  return { ...result, from, to: Date.now() };
}

/**
 * Every phrase relativeTime() gives for `iso` at some moment of a run: the
 * console reads its clock once (lib/console/_context.ts), at a moment this
 * process cannot see, so on a slow machine "5 minutes ago" may rightly be
 * "6 minutes ago". As a regular expression alternative; anything else (a
 * wrong unit, a wrong count for that window) still fails.
 */
function agoIn(run: { from: number; to: number }, iso: unknown): string {
  const phrases = new Set<string>();
  // The phrase changes at most once a minute below an hour: a step of a
  // second finds every one the window holds.
  for (let now = run.from; now < run.to + 1000; now += 1000) {
    phrases.add(relativeTime(String(iso), { now: Math.min(now, run.to) }));
  }
  return `(?:${
    [...phrases].map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")
  })`;
}

Deno.test("list shows times relative to now, LAST USED as never when unused, and --json keeps exact times", async () => {
  using dir = tempDir();
  const records = aged();
  await seed(dir.path, records);
  const list = await clocked(dir.path, (cwd) => keys(cwd, ["list", "--all"]));
  assert.equal(list.code, 0, list.stderr);
  const ago = (iso: unknown) => agoIn(list, iso);
  const rows = list.stdout.trim().split("\n");
  assert.match(
    rows[0],
    /\bCREATED\s+LAST USED\s+HINT\s+EXPIRES\s+RATE\s+EXPOSED\s+REVOKED\b/,
  );
  assert.match(
    rows[1],
    new RegExp(
      `^1\\s+site-1\\s.*valid\\s+${ago(records[0].createdAt)}\\s+${
        ago(records[0].lastUsedAt)
      }\\s`,
    ),
  );
  assert.match(
    rows[2],
    new RegExp(
      `^2\\s+site-2\\s.*${ago(records[1].createdAt)}\\s+never\\s+isk_…abcd\\s+${
        ago(records[1].exposedAt)
      } from 203\\.0\\.113\\.9$`,
    ),
  );
  assert.match(
    rows[3],
    new RegExp(
      `^3\\s+site-3\\s.*revoked\\s+${ago(records[2].createdAt)}\\s+never\\s.*${
        ago(records[2].revokedAt)
      }\\s+person left$`,
    ),
  );
  assert.match(list.stderr, /Exposed: sent in a URL.*: 2; rotate each/);
  const json = JSON.parse(
    (await keys(dir.path, ["list", "--all", "--json"])).stdout,
  );
  assert.deepEqual(
    json.map((
      r: Record<string, unknown>,
    ) => [r.createdAt, r.lastUsedAt, r.exposedAt]),
    records.map((r) => [r.createdAt, r.lastUsedAt, r.exposedAt]),
  );
});

Deno.test("relative times in list and show are read against the console's own clock, whenever it runs", () => {
  // What agoIn() allows: the phrases of the window, and only those.
  const at = Date.parse("2026-11-21T12:00:00.000Z");
  const iso = new Date(at - 5 * MINUTE - 10_000).toISOString();
  const quick = { from: at, to: at + 2000 };
  const slow = { from: at, to: at + 75_000 };
  assert.equal(agoIn(quick, iso), "(?:5 minutes ago)");
  assert.equal(agoIn(slow, iso), "(?:5 minutes ago|6 minutes ago)");
  assert.doesNotMatch("6 minutes ago", new RegExp(`^${agoIn(quick, iso)}$`));
});

Deno.test("show prints each time exactly and relative to now", async () => {
  using dir = tempDir();
  const records = aged();
  await seed(dir.path, records);
  const show = await clocked(dir.path, (cwd) => keys(cwd, ["show", "site-1"]));
  assert.equal(show.code, 0, show.stderr);
  assert.match(
    show.stdout,
    new RegExp(
      `\\ncreatedAt\\s+${records[0].createdAt} \\(${
        agoIn(show, records[0].createdAt)
      }\\)\\n`,
    ),
  );
  assert.match(
    show.stdout,
    new RegExp(
      `\\nlastUsedAt\\s+${records[0].lastUsedAt} \\(${
        agoIn(show, records[0].lastUsedAt)
      }\\)\\n`,
    ),
  );
  const unused = await keys(dir.path, ["show", "2"]);
  assert.match(unused.stdout, /\nlastUsedAt\s+never\n/);
  assert.match(unused.stdout, /\nexposedFrom\s+203\.0\.113\.9\n/);
});

Deno.test("piped output carries no colour codes, even for revoked and exposed keys", async () => {
  using dir = tempDir();
  await seed(dir.path, aged());
  for (
    const args of [["list", "--all"], ["show", "2"], ["show", "3"], ["audit"]]
  ) {
    const result = await keys(dir.path, args);
    assert.equal(result.code, 0, result.stderr);
    assert.ok(
      !(result.stdout + result.stderr).includes("\x1b"),
      args.join(" "),
    );
  }
});

Deno.test("piped list and audit show the longest EXPIRES, RATE and ACTION values whole, not cut with an ellipsis", async () => {
  using dir = tempDir();
  const made = await keys(dir.path, [
    "create",
    "--name",
    "berlin-erp",
    "--email",
    "ops@example.com",
    "--rate",
    "5/min",
    "--json",
  ]);
  assert.equal(made.code, 0, made.stderr);
  // Key 1 is retiring for an hour: "in 59 minutes (retiring)".
  const rotate = await keys(dir.path, [
    "rotate",
    "berlin-erp",
    "--overlap",
    "1h",
    "--yes",
    "--json",
  ]);
  assert.equal(rotate.code, 0, rotate.stderr);
  // The line's one limit: the update sets both keys (an audit line each).
  for (
    const change of [
      ["--rate", "1000000000/86399s"],
      ["--allow-from", "10.0.0.0/8"],
    ]
  ) {
    const updated = await keys(dir.path, ["update", "2", "--yes", ...change]);
    assert.equal(updated.code, 0, updated.stderr);
  }
  const list = await keys(dir.path, ["list"]);
  assert.equal(list.code, 0, list.stderr);
  assert.match(list.stdout, /\bin (59 minutes|1 hour) \(retiring\) /);
  assert.match(list.stdout, / 1000000000\/86399s\b/);
  // No cell is cut (a hint's ellipsis stands for the key's hidden middle).
  assert.ok(!list.stdout.replaceAll("isk_…", "").includes("…"), list.stdout);
  const audit = await keys(dir.path, ["audit"]);
  assert.equal(audit.code, 0, audit.stderr);
  const actions = audit.stdout.split("\n").slice(1).filter((l) => l !== "")
    .map((line) => line.slice(22).split(/\s+/)[0]);
  assert.deepEqual(actions, [
    "create",
    "rotate",
    "rate_limit",
    "rate_limit",
    "allow_from",
  ]);
});

Deno.test("revoke and rotate do not ask when stdin is not a terminal, whatever it holds", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin");
  await createKey(dir.path, "hamburg");
  for (const args of [["revoke", "berlin"], ["rotate", "hamburg"]]) {
    const child = taskCommand("keys", { cwd: dir.path, args, stdin: "piped" })
      .spawn();
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode("n\n"));
    await writer.close();
    const out = await child.output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    assert.ok(!stderr.includes("[y/N]"), stderr);
  }
  const left = JSON.parse((await keys(dir.path, ["list", "--json"])).stdout);
  assert.deepEqual(left.map((r: { id: number }) => r.id), [3]);
});

// At a terminal: `script` (util-linux) gives the console a pseudo-terminal
// for stdin and stdout, and copies both, with what was typed, to its stdout.

const SCRIPT = await (async () => {
  try {
    const probe = await new Deno.Command("script", { args: ["--version"] })
      .output();
    return probe.success;
  } catch {
    return false;
  }
})();

function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

function withoutNoColor(): Record<string, string> {
  const { NO_COLOR: _, ...rest } = Deno.env.toObject();
  return rest;
}

/** Runs `deno task keys ARGS` at a terminal `columns` wide, typing `input`. */
async function atTerminal(
  cwd: string,
  args: string[],
  options: { input?: string; columns?: number; env?: Record<string, string> } =
    {},
): Promise<RunResult> {
  const command = [Deno.execPath(), ...taskArgs("keys"), ...args]
    .map(shellQuote).join(" ");
  const child = new Deno.Command("script", {
    args: [
      "-qec",
      `stty cols ${options.columns ?? 120} rows 40; ${command}`,
      "/dev/null",
    ],
    cwd,
    // The parent's NO_COLOR (CI sets it) must not decide what this test sees.
    env: { ...withoutNoColor(), TERM: "xterm", ...options.env },
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(options.input ?? ""));
  await writer.close();
  const out = await child.output();
  const decoder = new TextDecoder();
  return {
    code: out.code,
    stdout: decoder.decode(out.stdout).replaceAll("\r\n", "\n"),
    stderr: decoder.decode(out.stderr),
  };
}

Deno.test({
  name:
    "at a terminal, list is coloured and fits its width; NO_COLOR turns colour off",
  ignore: !SCRIPT,
  async fn() {
    using dir = tempDir();
    const records = aged();
    await seed(dir.path, records);
    const wide = await clocked(
      dir.path,
      // Wide enough for every column of list --all at its full width.
      (cwd) => atTerminal(cwd, ["list", "--all"], { columns: 250 }),
    );
    assert.equal(wide.code, 0, wide.stdout);
    assert.ok(wide.stdout.includes("\x1b[31mrevoked\x1b[39m"), wide.stdout);
    assert.ok(wide.stdout.includes("\x1b[2msite-3\x1b[22m"), wide.stdout);
    assert.match(
      wide.stdout,
      new RegExp(
        `\\x1b\\[33m${
          agoIn(wide, records[1].exposedAt)
        } from 203\\.0\\.113\\.9\\x1b\\[39m`,
      ),
    );
    assert.ok(!wide.stdout.includes("Left out"));

    const narrow = await atTerminal(dir.path, ["list", "--all"], {
      columns: 80,
    });
    const table = narrow.stdout.split("\n").filter((l) => /^\S/.test(l))
      .map(stripAnsi).filter((l) => /^(ID|\d+ {2})/.test(l));
    assert.equal(table.length, 4, narrow.stdout);
    for (const line of table) assert.ok([...line].length <= 80, line);
    assert.match(narrow.stdout, /Left out to fit the terminal: .*EXPOSED/);

    const plain = await atTerminal(dir.path, ["list", "--all"], {
      env: { NO_COLOR: "1" },
    });
    assert.equal(plain.code, 0, plain.stdout);
    assert.match(plain.stdout, /revoked/);
    assert.ok(!plain.stdout.includes("\x1b["), plain.stdout);
  },
});

Deno.test({
  name:
    "at a terminal, revoke and rotate ask first: only y goes ahead, and --yes does not ask",
  ignore: !SCRIPT,
  async fn() {
    using dir = tempDir();
    await createKey(dir.path, "berlin-erp", "ops@example.com");
    await createKey(dir.path, "hamburg");
    const before = await changes(dir.path);
    for (const input of ["n\n", "\n", "maybe\n", ""]) {
      const declined = await atTerminal(dir.path, ["revoke", "berlin-erp"], {
        input,
      });
      assert.equal(declined.code, 1, declined.stdout);
      assert.match(
        declined.stdout,
        /Revoke key 1 "berlin-erp" \(ops@example\.com\)\? The next request with it gets 401\. \[y\/N\]/,
      );
      assert.match(
        declined.stdout,
        /Key 1 "berlin-erp" was not revoked; answer y/,
      );
    }
    const kept = await atTerminal(dir.path, ["rotate", "hamburg"], {
      input: "no\n",
    });
    assert.equal(kept.code, 1, kept.stdout);
    assert.match(kept.stdout, /Rotate key 2 "hamburg" .*\[y\/N\]/);
    assert.equal(await changes(dir.path), before);

    const revoked = await atTerminal(dir.path, ["revoke", "berlin-erp"], {
      input: "y\n",
    });
    assert.equal(revoked.code, 0, revoked.stdout);
    assert.match(revoked.stdout, /Revoked key 1 "berlin-erp"/);
    const rotated = await atTerminal(dir.path, ["rotate", "hamburg", "--yes"]);
    assert.equal(rotated.code, 0, rotated.stdout);
    assert.ok(!rotated.stdout.includes("[y/N]"), rotated.stdout);
    assert.match(rotated.stdout, /Revoked key 2 and created key 3/);
    // Revoking a revoked key changes nothing, so there is nothing to confirm.
    const again = await atTerminal(dir.path, ["revoke", "1"]);
    assert.equal(again.code, 0, again.stdout);
    assert.ok(!again.stdout.includes("[y/N]"), again.stdout);
  },
});

Deno.test("a reader that stops early (keys list | head) ends the listing quietly", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin");
  const child = taskCommand("keys", { cwd: dir.path, args: ["list", "--json"] })
    .spawn();
  await child.stdout.cancel(); // like head -c 0: gone before the first byte
  const status = await child.status;
  const stderr = new TextDecoder().decode(
    (await new Response(child.stderr).arrayBuffer()) as ArrayBuffer,
  );
  assert.equal(status.code, 0, stderr);
  assert.doesNotMatch(stderr, /BrokenPipe|Uncaught/);
});

Deno.test("a listing that fails puts no fragment on stdout: no header without rows, no [ without ], only the --json failure", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin");
  // An import that died half-way: the store refuses to be listed until it is resolved.
  const kv = await Deno.openKv(`${dir.path}/data/keys.db`);
  await kv.set(["importing"], {
    token: "t",
    state: "importing",
    startedAt: new Date().toISOString(),
    actor: "test",
  });
  kv.close();
  const plain = await keys(dir.path, ["list", "--all"]);
  assert.equal(plain.code, 1, plain.stderr);
  assert.equal(plain.stdout, "", "list --all printed a fragment");
  assert.match(plain.stderr, /import --abort/);
  // With --json, the one value on stdout is the failure: no [ before it.
  const json = await keys(dir.path, ["list", "--all", "--json"]);
  assert.equal(json.code, 1, json.stderr);
  assert.deepEqual(JSON.parse(json.stdout), {
    error: { code: "import_unfinished", message: json.stderr.trim() },
  });
});
