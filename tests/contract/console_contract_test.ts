/**
 * docs/console.md as a contract: every exit code and every `--json` shape it
 * states, one row each, run through the keys task; the table of error codes
 * against the code's; and every piece of advice the console prints, run, so
 * that no advice names a command that then refuses.
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { newRecord } from "../../lib/store/records.ts";
import { CONSOLE_ERROR_CODES } from "../../lib/console/errors.ts";
import { COMMANDS } from "../../lib/console/commands.ts";
import { commandHelp } from "../../lib/console/_help.ts";
import { taskCommand, tempDir } from "../support/processes.ts";

/** What one run of the keys task printed. */
interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `deno task -q keys ARGS` in `cwd`, with `stdin` written to it. */
async function run(
  cwd: string,
  args: string[],
  options: {
    stdin?: string;
    env?: Record<string, string>;
    stdout?: "piped" | "null";
  } = {},
): Promise<Ran> {
  const child = taskCommand("keys", {
    cwd,
    args,
    env: options.env,
    stdin: "piped",
    stdout: options.stdout ?? "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(options.stdin ?? ""));
  await writer.close();
  const out = await child.output();
  const decoder = new TextDecoder();
  return {
    code: out.code,
    stdout: options.stdout === "null" ? "" : decoder.decode(out.stdout),
    stderr: decoder.decode(out.stderr),
  };
}

/** Every field `show --json` and the other record outputs carry. */
const RECORD = [
  "id",
  "name",
  "email",
  "status",
  "hint",
  "createdAt",
  "revokedAt",
  "revokedReason",
  "exposedAt",
  "exposedFrom",
  "lastUsedAt",
  "expiresAt",
  "replacedBy",
  "retires",
  "rotatedFrom",
  "allowFrom",
  "rateLimit",
  "networks",
  "refusedUses",
];

/** The shape of a JSON value: its keys, or those of its first element. */
type Shape =
  | { object: string[] }
  | { array: string[] | "empty" };

/** One row of the contract: a command line, its exit code and its --json. */
interface Row {
  args: string[];
  /** The exit code docs/console.md gives for the case. */
  exit: 0 | 1 | 2 | 3;
  /** For a failure: the error code of `{"error":{"code","message"}}`. */
  error?: string;
  /** For a success: the shape of the one JSON value. */
  shape?: Shape;
  stdin?: string;
  env?: Record<string, string>;
  /** Run in a folder of its own, with an empty store. */
  fresh?: boolean;
  /** stdout to /dev/null, as `>&-` leaves it. */
  discardStdout?: boolean;
}

/**
 * The rows, in order on one store: 1 berlin, 2 hamburg (rotated into 3),
 * 1 revoked last; an export of it for the import rows.
 */
function rows(key: { identify: () => string }): Row[] {
  return [
    { args: ["--help"], exit: 0, shape: { object: ["help"] } },
    { args: ["create", "--help"], exit: 0, shape: { object: ["help"] } },
    {
      args: ["create", "--name", "berlin", "--email", "ops@example.com"],
      exit: 0,
      shape: { object: [...RECORD, "key", "store"] },
    },
    {
      args: ["create", "--name", "hamburg", "--email", "it@example.com"],
      exit: 0,
      shape: { object: [...RECORD, "key", "store"] },
    },
    { args: ["list"], exit: 0, shape: { array: RECORD } },
    { args: ["list", "--all"], exit: 0, shape: { array: RECORD } },
    { args: ["show", "berlin"], exit: 0, shape: { object: RECORD } },
    {
      args: ["update", "1", "--allow-from", "192.0.2.0/24"],
      exit: 0,
      shape: { object: [...RECORD, "store"] },
    },
    {
      args: ["rotate", "hamburg", "--yes"],
      exit: 0,
      shape: { object: [...RECORD, "key", "replaces", "retired", "store"] },
    },
    {
      args: ["revoke", "1", "--yes"],
      exit: 0,
      shape: { object: [...RECORD, "store"] },
    },
    {
      args: ["revoke", "1", "--reason", "again"],
      exit: 0,
      shape: { object: [...RECORD, "store"] },
    },
    {
      args: ["audit"],
      exit: 0,
      shape: { array: ["at", "action", "keyId", "actor", "detail"] },
    },
    {
      args: ["audit", "3"],
      exit: 0,
      shape: { array: ["at", "action", "keyId", "actor", "detail"] },
    },
    {
      args: ["identify"],
      get stdin() {
        return `X-API-Key: ${key.identify()}\n`;
      },
      exit: 0,
      shape: {
        object: ["id", "name", "email", "status", "revokedAt", "exposedAt"],
      },
    },
    {
      args: ["export", "./data/backup.jsonl"],
      exit: 0,
      shape: { object: ["file", "keys", "audit", "exportedAt"] },
    },
    {
      args: ["import", "--abort"],
      exit: 0,
      shape: { object: ["aborted", "store"] },
    },
    // 2: the command line was wrong.
    { args: ["frobnicate"], exit: 2, error: "unknown_command" },
    { args: ["list", "--colour"], exit: 2, error: "unknown_option" },
    { args: ["list", "-x"], exit: 2, error: "unknown_option" },
    {
      args: ["create", "--name", "x", "--name", "y", "--email", "a@b.example"],
      exit: 2,
      error: "option_repeated",
    },
    {
      args: ["create", "--name", "--email", "a@example.com"],
      exit: 2,
      error: "option_value_missing",
    },
    { args: ["create", "--name"], exit: 2, error: "option_value_missing" },
    {
      args: ["revoke", "3", "--yes=no"],
      exit: 2,
      error: "option_value_unexpected",
    },
    {
      args: ["create", "--email", "a@example.com"],
      exit: 2,
      error: "option_required",
    },
    {
      args: [
        "create",
        "--name",
        "x",
        "--email",
        "a@example.com",
        "--expires-in",
        "1d",
        "--expires-at",
        "2030-01-31T00:00:00Z",
      ],
      exit: 2,
      error: "options_conflict",
    },
    { args: ["show"], exit: 2, error: "argument_missing" },
    { args: ["show", "1", "2"], exit: 2, error: "argument_extra" },
    {
      args: ["create", "--name", "x", "--email", "not-an-address"],
      exit: 2,
      error: "invalid_email",
    },
    {
      args: ["create", "--name", "12", "--email", "a@example.com"],
      exit: 2,
      error: "invalid_name",
    },
    {
      args: ["update", "3", "--allow-from", "10.0.0.1/99"],
      exit: 2,
      error: "invalid_allowFrom",
    },
    {
      args: ["update", "3", "--rate", "600/fortnight"],
      exit: 2,
      error: "rate_syntax",
    },
    {
      args: [
        "create",
        "--name",
        "x",
        "--email",
        "a@b.example",
        "--rate",
        "9999999999/s",
      ],
      exit: 2,
      error: "rate_too_large",
    },
    {
      args: [
        "create",
        "--name",
        "x",
        "--email",
        "a@b.example",
        "--rate",
        "0/min",
      ],
      exit: 2,
      error: "invalid_rateLimit",
    },
    {
      args: ["create", "--name", "x", "--email", "a@b.example", "--expires-in"],
      exit: 2,
      error: "option_value_missing",
    },
    {
      args: ["show", "99999999999999999999"],
      exit: 2,
      error: "key_id_out_of_range",
    },
    { args: ["show", "0"], exit: 2, error: "key_id_out_of_range" },
    {
      args: ["show", generateApiKey().key],
      exit: 2,
      error: "key_argument",
    },
    {
      args: ["import", "/nonexistent.jsonl"],
      exit: 2,
      error: "file_not_found",
    },
    {
      args: ["export", "./no-such-folder/backup.jsonl"],
      exit: 2,
      error: "file_not_found",
    },
    {
      args: ["identify", "./no-such-file.txt"],
      exit: 2,
      error: "file_not_found",
    },
    // 1: the command failed.
    { args: ["show", "99"], exit: 1, error: "key_not_found" },
    { args: ["show", "nobody"], exit: 1, error: "key_not_found" },
    {
      args: ["create", "--name", "HAMBURG", "--email", "b@example.com"],
      exit: 1,
      error: "name_taken",
    },
    { args: ["rotate", "2", "--yes"], exit: 1, error: "rotate_revoked" },
    {
      args: ["update", "1", "--allow-from", "any"],
      exit: 1,
      error: "key_revoked",
    },
    {
      args: ["export", "./data/backup.jsonl"],
      exit: 1,
      error: "file_exists",
    },
    {
      args: ["import", "./data/backup.jsonl"],
      exit: 1,
      error: "import_not_empty",
    },
    {
      args: ["identify"],
      stdin: "not a key at all\n",
      exit: 1,
      error: "not_a_key",
    },
    {
      args: ["identify"],
      stdin: `${generateApiKey().key}\n`,
      exit: 1,
      error: "unknown_key_value",
    },
    {
      args: ["list"],
      env: { DENO_KV_PATH: "data/" },
      exit: 1,
      error: "config_invalid",
    },
    {
      args: ["create", "--name", "nowhere", "--email", "a@example.com"],
      discardStdout: true,
      exit: 1,
      error: "stdout_discards",
    },
    // A fresh store: what an empty one answers.
    { args: ["list"], fresh: true, exit: 0, shape: { array: "empty" } },
    { args: ["audit"], fresh: true, exit: 0, shape: { array: "empty" } },
    // No server runs on it: status says so with its exit code, its value whole.
    {
      args: ["status"],
      fresh: true,
      exit: 3,
      shape: { object: ["store", "revision", "live", "servers", "figures"] },
    },
  ];
}

Deno.test("every exit code and --json shape of docs/console.md: exactly one JSON value on stdout, a failure's with its stable code and the message stderr has", async () => {
  using dir = tempDir();
  using fresh = tempDir();
  let identify = "";
  const issued: string[] = [];
  const table = rows({ identify: () => identify });
  for (const row of table) {
    const cwd = row.fresh ? fresh.path : dir.path;
    const args = [...row.args, "--json"];
    const label = args.join(" ");
    const result = await run(cwd, args, {
      stdin: row.stdin,
      env: row.env,
      stdout: row.discardStdout ? "null" : "piped",
    });
    assert.equal(result.code, row.exit, `${label}: ${result.stderr}`);
    if (row.discardStdout) continue;
    // Exactly one JSON value: the whole of stdout parses, on one line.
    assert.equal(result.stdout.trimEnd().split("\n").length, 1, label);
    const value = JSON.parse(result.stdout);
    if (row.error !== undefined) {
      assert.deepEqual(Object.keys(value), ["error"], label);
      assert.deepEqual(Object.keys(value.error), ["code", "message"], label);
      assert.equal(value.error.code, row.error, `${label}: ${result.stderr}`);
      assert.ok(CONSOLE_ERROR_CODES.includes(value.error.code), label);
      // The same one line as on stderr.
      assert.equal(value.error.message, result.stderr.trim(), label);
      assert.equal(result.stderr.trim().split("\n").length, 1, label);
      // Without --json, the same exit code and nothing on stdout.
      const plain = await run(cwd, row.args, {
        stdin: row.stdin,
        env: row.env,
      });
      assert.equal(plain.code, row.exit, row.args.join(" "));
      assert.equal(plain.stdout, "", row.args.join(" "));
      continue;
    }
    const shape = row.shape!;
    if ("object" in shape) {
      assert.ok(!Array.isArray(value), label);
      assert.deepEqual(
        Object.keys(value).sort(),
        [...shape.object].sort(),
        label,
      );
    } else {
      assert.ok(Array.isArray(value), label);
      if (shape.array === "empty") assert.equal(value.length, 0, label);
      else {
        assert.ok(value.length > 0, label);
        for (const item of value) {
          assert.deepEqual(
            Object.keys(item).sort(),
            [...shape.array].sort(),
            label,
          );
        }
      }
    }
    // A command that changes keys names the store it changed: the KV file
    // as an absolute path, whatever DENO_KV_PATH's relative form.
    if ("object" in shape && shape.object.includes("store")) {
      assert.deepEqual(value.store, {
        kind: "kv",
        path: `${Deno.realPathSync(cwd)}/data/keys.db`,
      }, label);
    }
    // Keys go out once, on stdout of the command that made them.
    for (const secret of issued) {
      assert.ok(!result.stdout.includes(secret), label);
      assert.ok(!result.stderr.includes(secret), label);
    }
    if (typeof value.key === "string") {
      assert.ok(!result.stderr.includes(value.key), label);
      issued.push(value.key);
      // The key of "hamburg" (3, once rotated) is what identify looks up.
      identify = value.key;
    }
  }
  // An export is imported into the fresh store, which it then fills.
  await Deno.mkdir(`${fresh.path}/data`, { recursive: true });
  await Deno.copyFile(
    `${dir.path}/data/backup.jsonl`,
    `${fresh.path}/data/backup.jsonl`,
  );
  const imported = await run(fresh.path, [
    "import",
    "./data/backup.jsonl",
    "--json",
  ]);
  assert.equal(imported.code, 0, imported.stderr);
  assert.deepEqual(
    Object.keys(JSON.parse(imported.stdout)).sort(),
    ["audit", "exportedAt", "file", "keys", "store"],
  );
  assert.deepEqual(JSON.parse(imported.stdout).store, {
    kind: "kv",
    path: `${Deno.realPathSync(fresh.path)}/data/keys.db`,
  });
  // Every documented case of 1 and 2 has its row.
  const covered = new Set(
    table.filter((row) => row.error).map((row) => row.error),
  );
  for (
    const code of [
      "unknown_command",
      "unknown_option",
      "argument_missing",
      "file_not_found",
      "key_not_found",
      "name_taken",
    ]
  ) {
    assert.ok(covered.has(code), code);
  }
});

Deno.test("the error codes docs/console.md lists are exactly the codes --json may print", async () => {
  const doc = await Deno.readTextFile(
    new URL("../../docs/console.md", import.meta.url),
  );
  const section = doc.slice(doc.indexOf("## Error codes"));
  assert.ok(section.length > 0, "docs/console.md has an Error codes section");
  const listed = [
    ...section.slice(0, section.indexOf("\n## ", 4)).matchAll(
      /^\| `([a-z_A-Z]+)`/gm,
    ),
  ].map((m) => m[1]);
  assert.deepEqual([...listed].sort(), [...CONSOLE_ERROR_CODES].sort());
});

Deno.test("docs/console.md gives the store field of every command that changes keys, in both forms, as the rows above find it", async () => {
  const doc = await Deno.readTextFile(
    new URL("../../docs/console.md", import.meta.url),
  );
  const section = doc.slice(doc.indexOf("## The store a change names"));
  assert.ok(section.length > 0, "docs/console.md names the store of a change");
  const text = section.slice(0, section.indexOf("\n## ", 4));
  assert.ok(text.includes('"store":{"kind":"kv","path":'), text);
  assert.ok(
    text.includes(
      '"store":{"kind":"postgres","host":"db.internal","port":5432,"database":"keys"}',
    ),
    text,
  );
  // The commands whose rows above carry "store", and only those.
  const changing = rows({ identify: () => "" }).filter((row) =>
    row.shape !== undefined && "object" in row.shape &&
    row.shape.object.includes("store")
  ).map((row) => row.args[0]);
  for (const command of new Set(changing)) {
    assert.match(text, new RegExp(`\`${command}\``), command);
  }
  for (const command of ["list", "show", "audit", "identify", "export"]) {
    assert.doesNotMatch(text, new RegExp(`\`${command}\``), command);
  }
});

/** An export holding `records`, for `keys import`. */
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

Deno.test("revoke and rotate print the old key as the store holds it after the change: its last use and networks, not never and none", async () => {
  using dir = tempDir();
  const usedAt = new Date(Date.now() - 60_000).toISOString();
  const createdAt = new Date(Date.now() - 3_600_000).toISOString();
  const used = (id: number) => ({
    ...newRecord(id, {
      name: `site-${id}`,
      email: `site-${id}@example.com`,
      hash: id.toString(16).padStart(64, "0"),
      hint: "isk_…abcd",
    }, new Date(createdAt)),
    lastUsedAt: usedAt,
    networks: [{
      network: "192.0.2.0/24",
      firstSeenAt: usedAt,
      lastSeenAt: usedAt,
    }],
  });
  await Deno.mkdir(`${dir.path}/data`, { recursive: true });
  await Deno.writeTextFile(
    `${dir.path}/data/seed.jsonl`,
    exportFile([used(1), used(2)]),
  );
  const seeded = await run(dir.path, ["import", "./data/seed.jsonl"]);
  assert.equal(seeded.code, 0, seeded.stderr);

  const revoked = await run(dir.path, ["revoke", "1", "--yes", "--json"]);
  assert.equal(revoked.code, 0, revoked.stderr);
  const record = JSON.parse(revoked.stdout);
  assert.equal(record.status, "revoked");
  assert.equal(record.lastUsedAt, usedAt);
  assert.deepEqual(record.networks.map((n: { network: string }) => n.network), [
    "192.0.2.0/24",
  ]);
  const text = await run(dir.path, ["revoke", "1"]);
  assert.match(text.stdout, new RegExp(`\\nlastUsedAt\\s+${usedAt} `));
  assert.doesNotMatch(text.stdout, /none seen yet/);

  const rotated = await run(dir.path, ["rotate", "2", "--yes", "--json"]);
  assert.equal(rotated.code, 0, rotated.stderr);
  const { replaces } = JSON.parse(rotated.stdout);
  assert.equal(replaces.id, 2);
  assert.equal(replaces.lastUsedAt, usedAt);
  assert.equal(replaces.networks.length, 1);
});

/** The commands a message advises, as `"keys …"` or `"deno task -q keys …"`, split into words. */
function advisedCommands(message: string): string[][] {
  const commands: string[][] = [];
  for (const match of message.matchAll(/"(?:deno task -q )?keys ([^"]+)"/g)) {
    // KEY, NAME, FILE: a placeholder for the reader to fill in.
    if (/\b[A-Z]{3,}\b/.test(match[1])) continue;
    commands.push(shellWords(match[1]));
  }
  return commands;
}

/** Words as a POSIX shell splits them: spaces, and single quotes. */
function shellWords(line: string): string[] {
  const words: string[] = [];
  let word: string | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === " ") {
      if (word !== null) words.push(word);
      word = null;
    } else if (c === "'") {
      const end = line.indexOf("'", i + 1);
      word = (word ?? "") + line.slice(i + 1, end);
      i = end;
    } else if (c === "\\" && line[i + 1] === "'") {
      word = (word ?? "") + "'";
      i++;
    } else word = (word ?? "") + c;
  }
  if (word !== null) words.push(word);
  return words;
}

/**
 * Runs every command `result` advises, in order, on a copy of the store it
 * was printed about, and fails when one refuses: advice must lead somewhere.
 * Returns the commands run.
 */
async function followAdvice(
  cwd: string,
  result: Ran,
): Promise<string[][]> {
  // A --json value repeats stderr's message, escaped: read the message.
  const json = /^\s*[[{]/.test(result.stdout);
  const advised = advisedCommands(
    result.stderr + (json ? "" : result.stdout),
  );
  using copy = tempDir();
  await new Deno.Command("cp", { args: ["-a", `${cwd}/.`, copy.path] })
    .output();
  for (const args of advised) {
    const followed = await run(copy.path, args);
    assert.equal(
      followed.code,
      0,
      `advised "keys ${
        args.join(" ")
      }" refused after:\n${result.stderr}\nwith:\n${followed.stderr}`,
    );
  }
  return advised;
}

Deno.test("every command the console advises works: a retiring key whose replacement was revoked, revoked keys, a line still in its overlap", async () => {
  using dir = tempDir();
  const cwd = dir.path;
  const ok = async (args: string[]) => {
    const result = await run(cwd, args);
    assert.equal(result.code, 0, `${args.join(" ")}: ${result.stderr}`);
    return result;
  };
  // 1 "y" in an overlap, replaced by 2, which is revoked by name.
  await ok(["create", "--name", "y", "--email", "y@example.com"]);
  await ok(["rotate", "y", "--overlap", "1h", "--yes"]);
  const revokedByName = await ok(["revoke", "y", "--yes"]);
  // 3 "z" in an overlap, replaced by 4, still valid.
  await ok(["create", "--name", "z", "--email", "z@example.com"]);
  await ok(["rotate", "z", "--overlap", "1h", "--yes"]);
  // 5 "w" rotated into 6 at once.
  await ok(["create", "--name", "w o'neil", "--email", "w@example.com"]);
  await ok(["rotate", "5", "--yes"]);

  const cases: [string[], string][] = [
    [["rotate", "1", "--yes"], "rotate_retiring"],
    [["rotate", "2", "--yes"], "rotate_revoked"],
    [["update", "2", "--allow-from", "10.0.0.0/8"], "key_revoked"],
    [["rotate", "3", "--yes"], "rotate_retiring"],
    [["rotate", "5", "--yes"], "rotate_revoked"],
    [["update", "5", "--allow-from", "any"], "key_revoked"],
    [["show", "99"], "key_not_found"],
    [["show", "nobody"], "key_not_found"],
  ];
  const followed: string[][] = [
    ...await followAdvice(cwd, revokedByName),
  ];
  for (const [args, code] of cases) {
    const refused = await run(cwd, [...args, "--json"]);
    assert.equal(refused.code, 1, refused.stderr);
    assert.equal(JSON.parse(refused.stdout).error.code, code, refused.stderr);
    const advised = await followAdvice(cwd, refused);
    assert.ok(advised.length > 0, `no advice in: ${refused.stderr}`);
    followed.push(...advised);
  }
  // The cases the issue found: rotate 1 pointed to rotate 2, which refused;
  // update on a revoked key pointed to rotate, which refuses revoked keys.
  const verbs = followed.map((words) => words.slice(0, 2).join(" "));
  assert.ok(verbs.includes("revoke 1"), verbs.join(", "));
  assert.ok(!verbs.includes("rotate 2"), verbs.join(", "));
  assert.ok(verbs.includes("rotate 4"), verbs.join(", "));
  assert.ok(verbs.includes("rotate 6"), verbs.join(", "));
  assert.ok(verbs.includes("update 6"), verbs.join(", "));
  assert.ok(
    followed.some((words) => words[0] === "create" && words[2] === "y"),
    verbs.join(", "),
  );
});

Deno.test("every option in every command's --help stands apart from its text, however long its name", () => {
  for (const [name, command] of Object.entries(COMMANDS)) {
    const lines = commandHelp(command).split("\n").filter((line) =>
      line.startsWith("  --")
    );
    assert.ok(lines.length >= 2, name);
    const starts = new Set<number>();
    for (const line of lines) {
      const match = /^ {2}(--[a-z-]+(?: VALUE)?) {2,}(\S)/.exec(line);
      assert.ok(match, `${name}: "${line}" runs into its text`);
      starts.add(line.indexOf(match[2], 2 + match[1].length));
    }
    // One column for the texts of a command.
    assert.equal(starts.size, 1, `${name}: ${lines.join("\n")}`);
  }
});
