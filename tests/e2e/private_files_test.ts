/**
 * The store is private: whoever else has an account on the machine cannot
 * read the hashes and e-mail addresses in it, whatever the umask.
 */

import assert from "node:assert/strict";
import { createKey, startServer, tempDir } from "../support/processes.ts";

async function modes(folder: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {
    ".": ((await Deno.stat(folder)).mode! & 0o777).toString(8),
  };
  for await (const entry of Deno.readDir(folder)) {
    const mode = (await Deno.stat(`${folder}/${entry.name}`)).mode! & 0o777;
    out[entry.name] = mode.toString(8);
  }
  return out;
}

Deno.test("with umask 000, the data folder is 0700 and the store and its companions 0600", async () => {
  using dir = tempDir();
  // A folder and file left world-readable by an earlier version are fixed too.
  await Deno.mkdir(`${dir.path}/data`, { mode: 0o777 });
  await Deno.chmod(`${dir.path}/data`, 0o777);
  const previous = Deno.umask(0o000);
  try {
    await createKey(dir.path, "first");
    await using _server = await startServer(dir.path);
    await createKey(dir.path, "second"); // a second process writes meanwhile
    const seen = await modes(`${dir.path}/data`);
    assert.equal(seen["."], "700", JSON.stringify(seen));
    assert.ok(seen["keys.db"], JSON.stringify(seen));
    for (const [name, mode] of Object.entries(seen)) {
      if (name !== ".") assert.equal(mode, "600", `${name}: ${mode}`);
    }
    assert.ok(
      Object.keys(seen).some((name) => name.endsWith("-wal")),
      "the companions were checked",
    );
  } finally {
    Deno.umask(previous);
  }
});

Deno.test("an export written into the checkout by a relative FILE, and its hidden temporary file, are ignored by git and kept out of the image", async () => {
  const root = new URL("../../", import.meta.url).pathname;
  const names = [
    "relative.jsonl",
    "backups/keys-2026-11-21.jsonl",
    "keys.jsonl.gz",
    ".relative.jsonl.1a2b3c4d.tmp",
  ];
  for (const name of names) {
    const ignored = await new Deno.Command("git", {
      args: ["check-ignore", "--quiet", "--no-index", name],
      cwd: root,
    }).output();
    assert.equal(ignored.code, 0, `git does not ignore ${name}`);
  }
  const docker = await Deno.readTextFile(`${root}.dockerignore`);
  for (const pattern of ["*.jsonl", "*.jsonl.gz", ".*.tmp"]) {
    assert.ok(docker.split("\n").includes(pattern), pattern);
  }
});
