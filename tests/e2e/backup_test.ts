/** Backup and restore with `keys export` and `keys import`, as an administrator moves an installation. */

import assert from "node:assert/strict";
import { consoleArgs } from "../../scripts/keys.ts";
import {
  createKey,
  keys,
  sampleInstallation,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { check } from "../support/http.ts";

/** Everything the store holds, as the console shows it; `import` lines left out. */
async function contents(cwd: string): Promise<unknown> {
  const list = await keys(cwd, ["list", "--all", "--json"]);
  assert.equal(list.code, 0, list.stderr);
  const audit = await keys(cwd, ["audit", "--json"]);
  assert.equal(audit.code, 0, audit.stderr);
  return {
    keys: JSON.parse(list.stdout),
    audit: JSON.parse(audit.stdout).filter((e: { action: string }) =>
      e.action !== "import"
    ),
  };
}

async function isEmpty(cwd: string): Promise<boolean> {
  const list = await keys(cwd, ["list", "--all", "--json"]);
  const audit = await keys(cwd, ["audit", "--json"]);
  assert.equal(list.code + audit.code, 0, list.stderr + audit.stderr);
  return list.stdout.trim() === "[]" && audit.stdout.trim() === "[]";
}

async function writeData(
  cwd: string,
  name: string,
  text: string,
): Promise<string> {
  await Deno.mkdir(`${cwd}/data`, { recursive: true });
  await Deno.writeTextFile(`${cwd}/data/${name}`, text);
  return `./data/${name}`;
}

Deno.test("an export imported into a new store keeps every key working as before: valid ones 200, revoked ones 401", async () => {
  using source = tempDir();
  const made = await sampleInstallation(source.path);
  const exported = await keys(source.path, [
    "export",
    "./data/backup.jsonl",
    "--json",
  ]);
  assert.equal(exported.code, 0, exported.stderr);
  const summary = JSON.parse(exported.stdout);
  assert.deepEqual(
    [summary.file, summary.keys, summary.audit],
    ["./data/backup.jsonl", 4, 5],
  );
  assert.match(summary.exportedAt, /^\d{4}-\d\d-\d\dT.*Z$/);

  using target = tempDir();
  const file = await writeData(
    target.path,
    "backup.jsonl",
    await Deno.readTextFile(`${source.path}/data/backup.jsonl`),
  );
  const imported = await keys(target.path, ["import", file, "--json"]);
  assert.equal(imported.code, 0, imported.stderr);
  // The summary of the export, and the store it was imported into.
  assert.deepEqual(JSON.parse(imported.stdout), {
    ...summary,
    store: {
      kind: "kv",
      path: `${Deno.realPathSync(target.path)}/data/keys.db`,
    },
  });
  assert.deepEqual(await contents(target.path), await contents(source.path));

  await using server = await startServer(target.path);
  const valid = await check(server.url, made.valid);
  assert.equal(valid.status, 200, valid.body);
  assert.equal(JSON.parse(valid.body).apiKeyId, 1);
  assert.equal((await check(server.url, made.rotatedNew)).status, 200);
  assert.equal((await check(server.url, made.revoked)).status, 401);
  assert.equal((await check(server.url, made.rotatedOld)).status, 401);

  // Ids carry on after the imported ones, and names stay taken.
  assert.equal((await createKey(target.path, "dresden-erp")).id, 5);
  const taken = await keys(target.path, [
    "create",
    "--name",
    "berlin-erp",
    "--email",
    "x@example.com",
  ]);
  assert.equal(taken.code, 1);
  // The running server's usage flush adds a "network" line per first use
  // from a network, at a moment no request decides: not a change.
  const audit = JSON.parse(
    (await keys(target.path, ["audit", "--json"])).stdout,
  ).filter((line: { action: string }) => line.action !== "network");
  assert.equal(audit.at(-2).action, "import");
  assert.equal(audit.at(-2).detail, "4 keys and 5 audit lines");
});

Deno.test("an export holds hashes, never a key, with a header first and the counts last", async () => {
  using dir = tempDir();
  const made = await sampleInstallation(dir.path);
  const result = await keys(dir.path, ["export", "./data/backup.jsonl"]);
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, "");
  assert.match(
    result.stderr,
    /^Exported 4 keys and 5 audit lines to \.\/data\/backup\.jsonl\./,
  );
  const text = await Deno.readTextFile(`${dir.path}/data/backup.jsonl`);
  for (const key of Object.values(made)) {
    // The random part alone, so that no re-encoding of the whole key slips by.
    assert.ok(!text.includes(key.slice(4, 34)), "a key is in the export");
  }
  const lines = text.trimEnd().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(
    [lines[0].format, lines[0].version],
    ["integration-service-keys", 3],
  );
  assert.deepEqual(lines.at(-1), { type: "end", keys: 4, audit: 5 });
  const records = lines.filter((l) => l.type === "key").map((l) => l.record);
  assert.equal(records.length, 4);
  for (const record of records) assert.match(record.hash, /^[0-9a-f]{64}$/);
  assert.equal(
    (await Deno.stat(`${dir.path}/data/backup.jsonl`)).mode! & 0o077,
    0,
  );
});

Deno.test("export never overwrites an existing file and leaves no temporary file behind", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin-erp");
  const file = await writeData(dir.path, "backup.jsonl", "precious\n");
  const result = await keys(dir.path, ["export", file]);
  assert.equal(result.code, 1);
  assert.match(
    result.stderr.trim(),
    /^\.\/data\/backup\.jsonl already exists, and an export never overwrites a file; choose a new name/,
  );
  assert.equal(result.stderr.trim().split("\n").length, 1);
  assert.equal(
    await Deno.readTextFile(`${dir.path}/data/backup.jsonl`),
    "precious\n",
  );
  const names = [...Deno.readDirSync(`${dir.path}/data`)].map((e) => e.name);
  assert.ok(!names.some((n) => n.endsWith(".tmp")), names.join(", "));
});

Deno.test("the keys task grants export the folder of FILE, import FILE alone, and other commands no file", () => {
  const env = (name: string) =>
    name === "DENO_KV_PATH" ? "/var/lib/integration/keys.db" : undefined;
  const grants = (args: string[]) => {
    const flags = consoleArgs(args, env);
    const list = (kind: string) =>
      flags.find((f) => f.startsWith(`--allow-${kind}=`))?.split("=")[1]
        .split(",").sort() ?? [];
    return { read: list("read"), write: list("write") };
  };
  const store = "/var/lib/integration";
  assert.deepEqual(grants(["export", "/srv/backups/keys.jsonl"]), {
    read: ["/srv/backups", store],
    write: ["/srv/backups", store],
  });
  assert.deepEqual(grants(["import", "/srv/backups/keys.jsonl"]), {
    read: ["/srv/backups/keys.jsonl", store],
    write: [store],
  });
  for (
    const args of [
      ["export", "-"],
      ["import", "-"],
      ["import", "--abort"],
      [
        "list",
      ],
      ["export"],
      ["nonsense"],
    ]
  ) {
    assert.deepEqual(
      grants(args),
      { read: [store], write: [store] },
      args.join(" "),
    );
  }
});

Deno.test("export and import of a relative FILE resolve it against the folder the task runs in", async () => {
  using dir = tempDir();
  await createKey(dir.path, "berlin-erp");
  const exported = await keys(dir.path, ["export", "backup.jsonl"]);
  assert.equal(exported.code, 0, exported.stderr);
  assert.ok(await exists(`${dir.path}/backup.jsonl`));
  const imported = await keys(dir.path, ["import", "backup.jsonl"], {
    DENO_KV_PATH: "./restored/keys.db",
  });
  assert.equal(imported.code, 0, imported.stderr);
});

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch {
    return false;
  }
}

Deno.test("import into a store that holds keys exits 1 and changes nothing", async () => {
  using source = tempDir();
  await sampleInstallation(source.path);
  assert.equal(
    (await keys(source.path, ["export", "./data/backup.jsonl"])).code,
    0,
  );
  using target = tempDir();
  await createKey(target.path, "leipzig-erp");
  const before = await contents(target.path);
  const file = await writeData(
    target.path,
    "backup.jsonl",
    await Deno.readTextFile(`${source.path}/data/backup.jsonl`),
  );
  const result = await keys(target.path, ["import", file]);
  assert.equal(result.code, 1);
  assert.match(
    result.stderr.trim(),
    /^The store is not empty; import only into a new store/,
  );
  assert.equal(result.stderr.trim().split("\n").length, 1);
  assert.deepEqual(await contents(target.path), before);
});

Deno.test("a malformed export exits 1 with one line naming the line, and leaves the store empty", async () => {
  using source = tempDir();
  await sampleInstallation(source.path);
  assert.equal(
    (await keys(source.path, ["export", "./data/backup.jsonl"])).code,
    0,
  );
  const good = (await Deno.readTextFile(`${source.path}/data/backup.jsonl`))
    .trimEnd().split("\n");
  const damaged: [string, string[], RegExp][] = [
    [
      "a line that is not JSON",
      [...good.slice(0, 3), '{"type":"key","record":{', ...good.slice(3)],
      /^Line 4 of \.\/data\/bad\.jsonl is not valid JSON; fix the line or export again$/,
    ],
    [
      "a record with a bad field",
      good.map((l, i) =>
        i === 2 ? l.replace(/"hash":"[0-9a-f]+"/, '"hash":"x"') : l
      ),
      /^Line 3 of \.\/data\/bad\.jsonl: the import's key 2 has a hash that is not SHA-256 hex; fix or regenerate the export$/,
    ],
    [
      "a line of unknown type",
      [...good.slice(0, 2), '{"type":"secret"}', ...good.slice(2)],
      /^Line 3 of \.\/data\/bad\.jsonl is neither a key, an audit line nor the end line/,
    ],
    [
      "no header",
      good.slice(1),
      /^Line 1 of \.\/data\/bad\.jsonl is not the header of a keys export/,
    ],
    [
      "a newer format",
      [good[0].replace('"version":3', '"version":4'), ...good.slice(1)],
      /^Line 1 of \.\/data\/bad\.jsonl says export version 4, and this console reads version 3/,
    ],
    [
      "a file cut short",
      good.slice(0, -2),
      /^\.\/data\/bad\.jsonl ends at line 9 without its end line, so it was cut short/,
    ],
    [
      "counts that do not match",
      [...good.slice(0, 2), ...good.slice(3)],
      /^The end line of \.\/data\/bad\.jsonl counts 4 keys and 5 audit lines, but the file holds 3 keys and 5 audit lines/,
    ],
    [
      "lines after the end",
      [...good, good[1]],
      /^Line 12 of \.\/data\/bad\.jsonl follows the end line/,
    ],
  ];
  for (const [what, lines, message] of damaged) {
    using dir = tempDir();
    const file = await writeData(
      dir.path,
      "bad.jsonl",
      lines.join("\n") + "\n",
    );
    const result = await keys(dir.path, ["import", file]);
    assert.equal(result.code, 1, `${what}: ${result.stderr}`);
    assert.match(result.stderr.trim(), message, what);
    assert.equal(result.stderr.trim().split("\n").length, 1, what);
    assert.equal(result.stdout, "", what);
    assert.ok(await isEmpty(dir.path), `${what}: the store is not empty`);
  }
  // Nothing is left over that would block a correct import afterwards.
  using dir = tempDir();
  await writeData(dir.path, "bad.jsonl", good.slice(0, -1).join("\n"));
  assert.equal((await keys(dir.path, ["import", "./data/bad.jsonl"])).code, 1);
  const file = await writeData(dir.path, "good.jsonl", good.join("\n") + "\n");
  const retry = await keys(dir.path, ["import", file]);
  assert.equal(retry.code, 0, retry.stderr);
});

Deno.test("a pre-release export (version 1 or 2) is refused in one line naming its version and the one read, exit 1 file_invalid, with nothing imported", async () => {
  using source = tempDir();
  await sampleInstallation(source.path);
  assert.equal(
    (await keys(source.path, ["export", "./data/backup.jsonl"])).code,
    0,
  );
  const good = (await Deno.readTextFile(`${source.path}/data/backup.jsonl`))
    .trimEnd().split("\n");
  for (const version of [1, 2]) {
    using dir = tempDir();
    const file = await writeData(
      dir.path,
      "old.jsonl",
      [
        good[0].replace('"version":3', `"version":${version}`),
        ...good.slice(1),
      ].join("\n") + "\n",
    );
    const result = await keys(dir.path, ["import", file]);
    assert.equal(result.code, 1, result.stderr);
    assert.match(
      result.stderr,
      new RegExp(
        `^Line 1 of \\./data/old\\.jsonl says export version ${version}, and this console reads version 3; [^\\n]*\\n$`,
      ),
    );
    assert.equal(result.stdout, "");
    const json = await keys(dir.path, ["import", file, "--json"]);
    assert.equal(json.code, 1, json.stderr);
    assert.equal(JSON.parse(json.stdout).error.code, "file_invalid");
    assert.ok(await isEmpty(dir.path), `version ${version}: not empty`);
  }
});

Deno.test("a large export streams back in across read and write batches", async () => {
  using dir = tempDir();
  const count = 2500;
  const now = new Date().toISOString();
  const lines = [
    JSON.stringify({
      format: "integration-service-keys",
      version: 3,
      exportedAt: now,
    }),
  ];
  for (let id = 1; id <= count; id++) {
    lines.push(JSON.stringify({
      type: "key",
      record: {
        id,
        name: `installation-${id}-${"x".repeat(40)}`,
        email: `ops-${id}@example.com`,
        status: id % 10 === 0 ? "revoked" : "valid",
        hash: id.toString(16).padStart(64, "0"),
        hint: "isk_…abcd",
        createdAt: now,
        revokedAt: id % 10 === 0 ? now : null,
        revokedReason: id % 10 === 0 ? "left" : null,
        exposedAt: null,
        exposedFrom: null,
        lastUsedAt: id % 3 === 0 ? now : null,
        expiresAt: null,
        replacedBy: null,
        retires: null,
        rotatedFrom: null,
        rateCounter: null,
        allowFrom: id % 7 === 0 ? ["192.0.2.0/24", "2001:db8::/48"] : null,
        rateLimit: id % 5 === 0 ? { count: 600, windowSeconds: 60 } : null,
        networks: [],
        refusedUses: [],
      },
    }));
  }
  lines.push(JSON.stringify({ type: "end", keys: count, audit: 0 }));
  const file = await writeData(dir.path, "big.jsonl", lines.join("\n") + "\n");
  const imported = await keys(dir.path, ["import", file, "--json"]);
  assert.equal(imported.code, 0, imported.stderr);
  assert.equal(JSON.parse(imported.stdout).keys, count);
  const listed = JSON.parse(
    (await keys(dir.path, ["list", "--all", "--json"])).stdout,
  );
  assert.equal(listed.length, count);
  assert.equal(
    listed.filter((r: { lastUsedAt: unknown }) => r.lastUsedAt).length,
    833,
  );
  const again = await keys(dir.path, [
    "export",
    "./data/again.jsonl",
    "--json",
  ]);
  assert.equal(again.code, 0, again.stderr);
  assert.deepEqual(
    [JSON.parse(again.stdout).keys, JSON.parse(again.stdout).audit],
    [count, 1],
  );
  const back = (await Deno.readTextFile(`${dir.path}/data/again.jsonl`))
    .trimEnd().split("\n");
  assert.deepEqual(
    back.slice(1, count + 1).map((line) => JSON.parse(line)),
    lines.slice(1, count + 1).map((line) => JSON.parse(line)),
  );
});

Deno.test("an interrupted export removes its unfinished file, created 0600, whichever signal ends it", async () => {
  for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143]] as const) {
    using dir = tempDir();
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-read",
        "--allow-write",
        new URL("../support/hanging_export.ts", import.meta.url).pathname,
        `${dir.path}/keys.jsonl`,
      ],
      stdout: "null",
      stderr: "piped",
    }).spawn();
    // Waits for the event, the unfinished file appearing, however long it takes.
    let temp: string | undefined;
    while (temp === undefined) {
      temp = [...Deno.readDirSync(dir.path)].map((e) => e.name)
        .find((n) => n.endsWith(".tmp"));
      if (temp === undefined) await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal((await Deno.stat(`${dir.path}/${temp}`)).mode! & 0o777, 0o600);
    child.kill(signal);
    const status = await child.output();
    assert.equal(status.code, code, signal);
    const names = [...Deno.readDirSync(dir.path)].map((e) => e.name);
    assert.deepEqual(names, [], `${signal} left ${names.join(", ")}`);
  }
});
