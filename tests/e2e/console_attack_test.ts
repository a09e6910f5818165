/**
 * The console and the check as an attacker meets them: a key whose reader
 * has gone, and stored or served text that tries to steer the terminal.
 */

import assert from "node:assert/strict";
import { generateApiKey, KEY_PATTERN } from "../../lib/auth/api_key.ts";
import {
  escapeControlCharacters,
  hasControlCharacters,
} from "../../lib/util/control_characters.ts";
import { rowLine } from "../../lib/console/_table.ts";
import { openStore } from "../../lib/store/open.ts";
import {
  ACTOR_MAX,
  normalizeActor,
  normalizeName,
  normalizeReason,
  REASON_MAX,
} from "../../lib/store/records.ts";
import type { KeyRecord } from "../../lib/store/types.ts";
import { InvalidFieldError } from "../../lib/store/errors.ts";
import { CHECK_ENV } from "../../lib/check/config.ts";
import { formatFirstLine } from "../../lib/check/format.ts";
import {
  createKey,
  keys,
  type RunResult,
  runTask,
  startServer,
  taskArgs,
  taskCommand,
  tempDir,
} from "../support/processes.ts";
import { check } from "../support/http.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

/** An OSC 52 clipboard write, a C1 CSI, a bidi override and isolate, DEL and a newline. */
const HOSTILE = "\x1b]52;c;cm0gLXJmIC8K\x07\u009b31m\u202egpj.exe\u2066\x7f\n";

/**
 * Anything a terminal would act on: every control character but the
 * newlines that end lines, and the bidirectional controls.
 */
const ACTS_ON_TERMINAL =
  // deno-lint-ignore no-control-regex
  /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

function assertHarmless(text: string, what: string): void {
  const found = text.match(ACTS_ON_TERMINAL);
  assert.equal(
    found,
    null,
    `${what} holds U+${
      found?.[0].charCodeAt(0).toString(16).padStart(4, "0")
    }:\n${JSON.stringify(text)}`,
  );
}

function assertNoKey(result: RunResult): void {
  assert.ok(
    !KEY_PATTERN.test(result.stderr),
    `a key on stderr:\n${result.stderr}`,
  );
}

/** Runs `deno task keys ARGS` with stdout a pipe whose reader is gone before the first byte. */
async function keysIntoDeadPipe(
  cwd: string,
  args: string[],
): Promise<RunResult> {
  const child = taskCommand("keys", { cwd, args }).spawn();
  await child.stdout.cancel(); // like `| head -c 0`
  const [status, stderr] = await Promise.all([
    child.status,
    new Response(child.stderr).text(),
  ]);
  return { code: status.code, stdout: "", stderr };
}

async function listAll(cwd: string): Promise<Record<string, unknown>[]> {
  const result = await keys(cwd, ["list", "--all", "--json"]);
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout);
}

Deno.test("rotate into a reader that has gone exits 1, says nothing changed, and the old key still authenticates", async () => {
  using dir = tempDir();
  const old = await createKey(dir.path, "berlin", "ops@example.com");
  for (const json of [[], ["--json"]]) {
    const result = await keysIntoDeadPipe(dir.path, [
      "rotate",
      "berlin",
      "--yes",
      ...json,
    ]);
    assert.equal(result.code, 1, result.stderr);
    assert.equal(
      result.stderr.trim(),
      'Key 1 "berlin" was not rotated: its replacement could not be written to stdout (the program reading it has exited); nothing changed and key 1 is still valid; run the command again with stdout to a terminal, a file or a live pipe',
    );
    assertNoKey(result);
  }
  const records = await listAll(dir.path);
  assert.deepEqual(records.map((r) => [r.id, r.status]), [[1, "valid"]]);
  await using server = await startServer(dir.path);
  assert.equal((await check(server.url, old.key)).status, 200);
});

Deno.test("create and rotate with stdout closed (>&-) or /dev/null change nothing and exit 1", async () => {
  using dir = tempDir();
  const old = await createKey(dir.path, "berlin", "ops@example.com");
  const commands = [
    ["rotate", "berlin", "--yes"],
    ["create", "--name", "hamburg", "--email", "it@example.com"],
  ];
  for (const redirect of [">&-", ">/dev/null"]) {
    for (const args of commands) {
      // The shell closes or redirects stdout, as an admin's script would.
      const line = [Deno.execPath(), ...taskArgs("keys"), ...args]
        .map((a) => `'${a}'`).join(" ");
      const out = await new Deno.Command("sh", {
        args: ["-c", `${line} ${redirect}`],
        cwd: dir.path,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stderr = new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 1, `${args[0]} ${redirect}: ${stderr}`);
      assert.match(
        stderr,
        /stdout is closed or \/dev\/null, where the key would be lost; nothing changed/,
      );
      assert.ok(!KEY_PATTERN.test(stderr));
    }
  }
  const records = await listAll(dir.path);
  assert.deepEqual(records.map((r) => [r.id, r.status]), [[1, "valid"]]);
  await using server = await startServer(dir.path);
  assert.equal((await check(server.url, old.key)).status, 200);
});

Deno.test("create into a reader that has gone exits 1 and revokes the undelivered key, leaving the others valid", async () => {
  using dir = tempDir();
  const kept = await createKey(dir.path, "berlin", "ops@example.com");
  for (const json of [[], ["--json"]]) {
    const result = await keysIntoDeadPipe(dir.path, [
      "create",
      "--name",
      "hamburg",
      "--email",
      "it@example.com",
      ...json,
    ]);
    assert.equal(result.code, 1, result.stderr);
    assert.match(
      result.stderr.trim(),
      /^Key (2|3) was created but could not be written to stdout \(the program reading it has exited\); it has been revoked and no other key changed; run the command again with stdout to a terminal, a file or a live pipe$/,
    );
    assertNoKey(result);
  }
  const records = await listAll(dir.path);
  assert.deepEqual(records.map((r) => [r.id, r.status, r.revokedReason]), [
    [1, "valid", null],
    [2, "revoked", "not delivered"],
    [3, "revoked", "not delivered"],
  ]);
  await using server = await startServer(dir.path);
  assert.equal((await check(server.url, kept.key)).status, 200);
});

Deno.test("names, e-mails and reasons that could steer a terminal, or are too long, are refused with exit 2 before any change", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin");
  const before = (await keys(dir.path, ["audit", "--json"])).stdout;
  const refused: [string[], RegExp][] = [
    [
      ["create", "--name", "invoice\u202egpj.exe", "--email", "a@example.com"],
      /^--name: Name must not contain control or bidirectional characters$/,
    ],
    [
      ["create", "--name", "x", "--email", "ops\u2066@example.com"],
      /^--email: Email must be an address such as ops@example\.com of at most 254 characters, not "ops\\u2066@example\.com"$/,
    ],
    [
      ["create", "--name", "n".repeat(65), "--email", "a@example.com"],
      /^--name: Name must be at most 64 characters; shorten it$/,
    ],
    [
      ["revoke", "berlin", "--reason", `left${HOSTILE}`],
      /^--reason: Reason must not contain control or bidirectional characters; write it on one line$/,
    ],
    [
      ["revoke", "berlin", "--reason", "r".repeat(501)],
      /^--reason: Reason must be at most 500 characters; shorten it$/,
    ],
    [
      ["revoke", "berlin", "--reason", "  "],
      /^--reason: Reason must not be empty/,
    ],
  ];
  for (const [args, message] of refused) {
    const result = await keys(dir.path, args);
    assert.equal(result.code, 2, `${args[0]}: ${result.stderr}`);
    assert.match(result.stderr.trim(), message);
    assertHarmless(result.stderr, args[0]);
  }
  assert.equal((await keys(dir.path, ["audit", "--json"])).stdout, before);
});

/** Bidi controls only: what the console accepted in names and e-mails before. */
const REORDERING = "\u202egpj.exe\u2066";

/**
 * Writes hostile fields straight into the KV store, as an older version, an
 * import or a hand-edited store may have left them: the console refuses
 * such input now, so only the store's own API and layout can plant them.
 * Key 1 stays valid with the bidi controls an older console let through;
 * key 2 is revoked, with every hostile character in every text field.
 */
async function plantHostileRecords(cwd: string): Promise<void> {
  await createKey(cwd, "site-1", "a@example.com");
  await createKey(cwd, "site-2", "b@example.com");
  const path = `${cwd}/data/keys.db`;
  const store = await openStore({ kind: "kv", path });
  try {
    await store.revoke(2, { actor: `mallory${HOSTILE}`, reason: HOSTILE });
  } finally {
    await store.close();
  }
  const fields: Record<number, Partial<KeyRecord>> = {
    1: { name: `site-1${REORDERING}`, email: `ops${REORDERING}@example.com` },
    2: {
      name: `site-2${HOSTILE}`,
      email: `${HOSTILE}@example.com`,
      exposedFrom: HOSTILE,
    },
  };
  const kv = await Deno.openKv(path);
  try {
    for (const id of [1, 2]) {
      const entry = await kv.get<KeyRecord>(["keys", id]);
      assert.ok(entry.value, `key ${id} is stored under ["keys", ${id}]`);
      const record = { ...entry.value, ...fields[id] };
      await kv.atomic()
        .set(["keys", id], record)
        .set(["keys_by_hash", record.hash], record)
        .commit();
    }
  } finally {
    kv.close();
  }
}

Deno.test("list, show and audit show hostile stored fields as visible escapes, and --json gives them back exactly", async () => {
  using dir = tempDir();
  await plantHostileRecords(dir.path);
  for (
    const args of [["list", "--all"], ["show", "1"], ["show", "2"], ["audit"]]
  ) {
    const result = await keys(dir.path, args);
    assert.equal(result.code, 0, result.stderr);
    assertHarmless(result.stdout + result.stderr, args.join(" "));
    assert.match(
      result.stdout,
      args[0] === "show" && args[1] === "1"
        ? /\\u202egpj\.exe\\u2066/
        : /\\u001b\]52;c;/,
      args.join(" "),
    );
  }
  const show = await keys(dir.path, ["show", "2"]);
  assert.match(
    show.stdout,
    /\nrevokedReason +\\u001b\]52;c;cm0gLXJmIC8K\\u0007\\u009b31m\\u202egpj\.exe\\u2066\\u007f\\u000a\n/,
  );
  for (const args of [["list", "--all"], ["show", "2"], ["audit"]]) {
    const json = await keys(dir.path, [...args, "--json"]);
    assert.equal(json.code, 0, json.stderr);
    assertHarmless(json.stdout, `${args.join(" ")} --json`);
    const text = JSON.stringify(JSON.parse(json.stdout));
    assert.ok(text.includes(JSON.stringify(HOSTILE).slice(1, -1)), text);
  }
});

Deno.test("a key whose name an older console let through is rotated and revoked with its name quoted harmlessly", async () => {
  using dir = tempDir();
  await plantHostileRecords(dir.path);
  const rotated = await keys(dir.path, ["rotate", "1"]);
  assert.equal(rotated.code, 0, rotated.stderr);
  assertHarmless(rotated.stderr, "rotate");
  assert.match(
    rotated.stderr,
    /^Revoked key 1 and created key 3 "site-1\\u202egpj\.exe\\u2066" for ops\\u202egpj\.exe\\u2066@example\.com in the store [^\n]+\.\n/,
  );
  const revoked = await keys(dir.path, ["revoke", "3"]);
  assert.equal(revoked.code, 0, revoked.stderr);
  assertHarmless(revoked.stderr + revoked.stdout, "revoke");
  assert.match(revoked.stderr, /^Revoked key 3 "site-1\\u202egpj/);
  const again = await keys(dir.path, ["revoke", "2"]);
  assert.equal(again.code, 0, again.stderr);
  assertHarmless(again.stderr + again.stdout, "revoke again");
  assert.match(again.stderr, /^Key 2 "site-2\\u001b\]52;.*already revoked/);
});

Deno.test("a hostile USER reaches the audit log escaped and bounded", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin", "ops@example.com", {
    USER: `${HOSTILE}${"u".repeat(300)}`,
  });
  const json = await keys(dir.path, ["audit", "--json"]);
  const [entry] = JSON.parse(json.stdout);
  assert.ok(!hasControlCharacters(entry.actor), entry.actor);
  assert.ok([...entry.actor].length <= ACTOR_MAX, entry.actor);
  assert.ok(entry.actor.startsWith("\\u001b]52;c;"), entry.actor);
  const text = await keys(dir.path, ["audit"]);
  assertHarmless(text.stdout, "audit");
});

Deno.test("a key in USER, with or without its prefix, is withheld from the audit log and every backup", async () => {
  using dir = tempDir();
  const leaked = generateApiKey().key;
  for (
    const [name, user] of [["prefixed", leaked], ["bare", leaked.slice(4)]]
  ) {
    const made = await createKey(dir.path, name, "ops@example.com", {
      USER: user,
    });
    assert.ok(made.id > 0);
  }
  const audit = JSON.parse((await keys(dir.path, ["audit", "--json"])).stdout);
  assert.deepEqual(
    audit.map((entry: { actor: string }) => entry.actor.split("@")[0]),
    ["withheld", "withheld"],
  );
  const backup = await keys(dir.path, ["export", "-"]);
  assert.equal(backup.code, 0, backup.stderr);
  assert.ok(
    !backup.stdout.includes(leaked.slice(4, 20)),
    "the key is in the backup",
  );
});

/** A fake installation on loopback that answers every check with this e-mail. */
function hostileServer(email: string): { url: string } & AsyncDisposable {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () =>
      Response.json({
        connected: true,
        authenticatedByApiKey: true,
        apiKeyId: 7,
        email,
        serverUtc: new Date().toISOString(),
      }),
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
    },
  };
}

Deno.test("check shows a server's C1 controls and bidi overrides as escapes, and --json keeps the exact value", async () => {
  // C1 OSC 52 (a clipboard write), C1 CSI (red) and a right-to-left override:
  // none is a C0 control, so each passes as an e-mail address.
  const email = "\u009d52;c;cm0gLXJmIC8K\u009c\u009b31m\u202emoc.elpmaxe@ops";
  await using server = hostileServer(email);
  const env = {
    [CHECK_ENV.baseUrl]: server.url,
    // Well formed, never issued: the fake server accepts any key.
    [CHECK_ENV.apiKey]: generateApiKey().key,
  };
  const human = await runTask("check", { cwd: ROOT, env });
  assert.equal(human.code, 0, human.stdout + human.stderr);
  assertHarmless(human.stdout + human.stderr, "check");
  assert.ok(
    human.stdout.includes(
      "\\u009d52;c;cm0gLXJmIC8K\\u009c\\u009b31m\\u202emoc.elpmaxe@ops",
    ),
    human.stdout,
  );
  const json = await runTask("check", { cwd: ROOT, env, args: ["--json"] });
  assert.equal(json.code, 0, json.stdout + json.stderr);
  assertHarmless(json.stdout, "check --json");
  assert.equal(JSON.parse(json.stdout).email, email);
});

Deno.test("the escape leaves printable text alone and shows each control as \\uXXXX", () => {
  assert.equal(
    escapeControlCharacters("Zürich-ERP 東京 ✓"),
    "Zürich-ERP 東京 ✓",
  );
  assert.equal(
    escapeControlCharacters(
      "a\x1b[2Jb\u009bc\u202ed\u2069e\x7f\t\n\u2028\u061c\u200f",
    ),
    "a\\u001b[2Jb\\u009bc\\u202ed\\u2069e\\u007f\\u0009\\u000a\\u2028\\u061c\\u200f",
  );
  const value = { name: HOSTILE, list: [HOSTILE, "\\\u009b"] };
  const json = escapeControlCharacters(JSON.stringify(value));
  assertHarmless(json, "escaped JSON");
  assert.deepEqual(JSON.parse(json), value);
});

Deno.test("a table cell cannot carry a control character onto the screen", () => {
  const line = rowLine([
    { heading: "NAME", width: 80, cell: (r: string) => r },
    { heading: "ID", width: 3, cell: () => "1" },
  ], HOSTILE);
  assertHarmless(line, "row");
  assert.match(line, /^\\u001b\]52;c;cm0gLXJmIC8K\\u0007\\u009b31m\\u202e/);
});

Deno.test("the first line of a check shows a hostile summary as escapes", () => {
  const line = formatFirstLine({
    state: "OK",
    exitCode: 0,
    summary: `key 7 (${HOSTILE})`,
    reachable: true,
    url: null,
    httpStatus: 200,
    apiKeyId: 7,
    email: HOSTILE,
    serverUtc: null,
    clockOffsetSeconds: null,
    roundTripSeconds: null,
    maxOffsetSeconds: null,
    retryAfterSeconds: null,
    advice: null,
  });
  assertHarmless(line, "first line");
  assert.ok(!line.includes("\n"), line);
});

Deno.test("reasons are bounded and one line; actors are escaped and bounded; new names refuse bidi controls", () => {
  assert.equal(normalizeReason("  person left  "), "person left");
  assert.equal(normalizeReason("r".repeat(REASON_MAX)).length, REASON_MAX);
  assert.throws(() => normalizeReason("r".repeat(REASON_MAX + 1)), {
    field: "reason",
  });
  assert.throws(() => normalizeReason("a\nb"), { field: "reason" });
  const actor = normalizeActor(`${HOSTILE}${"x".repeat(500)}@host`);
  assert.ok(!hasControlCharacters(actor));
  assert.equal([...actor].length, ACTOR_MAX);
  assert.equal(normalizeActor(""), "unknown");
  assert.throws(() => normalizeName("payroll\u202e"), { field: "name" });
});

Deno.test("a name with an invisible character or an odd space is refused with exit 2, as it would look like another name", async () => {
  for (
    const invisible of [
      "\u200b", // zero width space
      "\u200d", // zero width joiner
      "\u2060", // word joiner
      "\ufeff", // byte order mark
      "\u00ad", // soft hyphen
      "\u00a0", // no-break space
      "\u3000", // ideographic space
      "\u3164", // Hangul filler
      "\ufe0f", // variation selector
      "\u{e0041}", // tag letter A
    ]
  ) {
    assert.throws(
      () => normalizeName(`berlin${invisible}erp`),
      (error: InvalidFieldError) => error.problem === "invisible_characters",
      JSON.stringify(invisible),
    );
  }
  assert.equal(
    normalizeName("berlin erp"),
    "berlin erp",
    "a plain space is fine",
  );
  using dir = tempDir();
  await createKey(dir.path, "berlin-erp");
  const result = await keys(dir.path, [
    "create",
    "--name",
    "berlin\u200b-erp",
    "--email",
    "ops@example.com",
  ]);
  assert.equal(result.code, 2);
  assert.match(
    result.stderr,
    /^--name: Name must not contain invisible characters/,
  );
  assert.doesNotMatch(result.stdout, /isk_/, "no key was made");
});
