/**
 * The README's walk-through, run as printed: the start command from its first
 * block, then every line of the second in one bash session, with `deno`
 * being this Deno, and again with `deno` being `npx -y -- deno@2.9.6`, as
 * the README promises. Only the port and /tmp are changed, so that the run
 * touches nothing outside its own folder. Each `curl -i` line must get the
 * status its comment shows.
 */

import assert from "node:assert/strict";
import { freePort, tempDir } from "../support/processes.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const README = await Deno.readTextFile(`${ROOT}README.md`);

/** The shell blocks after a heading, in order. */
function blocksAfter(heading: string): string[] {
  const section = README.slice(README.indexOf(heading));
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]);
}

/** The walk-through's second block as a bash script that checks each status. */
function walkThrough(block: string, port: number, tmp: string): string {
  const lines = block.replaceAll("localhost:8000", `localhost:${port}`)
    .replaceAll("/tmp/", `${tmp}/`).split("\n");
  const script = ["set -euo pipefail"];
  lines.forEach((line, i) => {
    if (line.trim() === "" || line.startsWith("#")) return;
    const trailing = line.match(/\s+#\s*(\d{3})\s*$/);
    const next = lines[i + 1]?.match(/^# HTTP\/[\d.]+ (\d{3})/);
    const expected = trailing?.[1] ?? next?.[1];
    const command = trailing ? line.slice(0, trailing.index) : line;
    if (expected === undefined) {
      script.push(command);
      return;
    }
    script.push(
      `status=$(${command} | head -n 1 | cut -d ' ' -f 2)`,
      `[ "$status" = ${expected} ] || { echo "expected ${expected}, got $status: line ${
        i + 1
      }" >&2; exit 1; }`,
    );
  });
  return script.join("\n");
}

/** A folder whose `deno` runs `target`. */
function denoOnPath(folder: string, target: string[]): string {
  Deno.mkdirSync(`${folder}/bin`);
  Deno.writeTextFileSync(
    `${folder}/bin/deno`,
    `#!/bin/sh\nexec ${target.map((w) => `'${w}'`).join(" ")} "$@"\n`,
    { mode: 0o755 },
  );
  return `${folder}/bin:${Deno.env.get("PATH")}`;
}

async function runWalkThrough(deno: string[]): Promise<void> {
  const [start, walk] = blocksAfter("## Walk-through");
  const startLine = start.split("\n")[0];
  assert.equal(startLine, "deno task start");
  assert.match(start, /"msg":"listening"/, "the README shows the first line");
  using dir = tempDir();
  const port = freePort();
  const env = {
    PATH: denoOnPath(dir.path, deno),
    PORT: String(port),
    DENO_KV_PATH: `${dir.path}/store/keys.db`,
    NO_COLOR: "1",
  };
  // Its own process group, so that the whole tree (npx, node, deno task,
  // the server) can be stopped at once: npx passes no signal on.
  const server = new Deno.Command("setsid", {
    args: ["bash", "-c", `exec ${startLine}`],
    cwd: ROOT,
    env,
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  try {
    const reader = server.stdout.pipeThrough(new TextDecoderStream())
      .getReader();
    let first = "";
    const deadline = Date.now() + 60_000;
    while (!first.includes("\n") && Date.now() < deadline) {
      const { value, done } = await reader.read();
      if (done) break;
      first += value;
    }
    assert.match(first, /"msg":"listening"/, "the first line is the service's");
    const drain = reader.read().then(function more(r): Promise<void> | void {
      if (!r.done) return reader.read().then(more);
    });
    const walked = await new Deno.Command("bash", {
      args: ["-c", walkThrough(walk, port, dir.path)],
      cwd: ROOT,
      env,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(walked.stderr);
    assert.equal(walked.code, 0, stderr);
    // The key is printed once, into the variable: never on the terminal.
    const stdout = new TextDecoder().decode(walked.stdout);
    assert.doesNotMatch(stdout + stderr, /isk_(?!test_)[A-Za-z0-9_-]{20,}/);
    // Nor does the task runner repeat a command line: its arguments may be
    // a reason, a path, or a key typed by mistake.
    assert.doesNotMatch(stderr, /Task keys/);
    // Both backups are as private as the store, whatever the shell's umask.
    for (const file of ["keys-backup.jsonl", "keys-backup.jsonl.gz"]) {
      const mode = (await Deno.stat(`${dir.path}/${file}`)).mode! & 0o777;
      assert.equal(mode.toString(8), "600", file);
    }
    Deno.kill(-server.pid, "SIGTERM");
    await drain;
  } finally {
    try {
      Deno.kill(-server.pid, "SIGKILL");
    } catch {
      // stopped already
    }
    await server.status;
    await server.stderr.cancel().catch(() => {});
  }
}

Deno.test({
  name: "the README's walk-through runs as printed with deno",
  sanitizeResources: false,
  async fn() {
    await runWalkThrough([Deno.execPath()]);
  },
});

const npx = await new Deno.Command("sh", {
  args: ["-c", "command -v npx"],
  stdout: "null",
}).output().then((o) => o.success, () => false);
if (!npx && Deno.env.get("CI") !== "true") {
  console.error(
    "readme_test.ts: npx is not installed, so the walk-through with npx is skipped",
  );
}

Deno.test({
  name: "the README's walk-through runs as printed with npx -y -- deno@2.9.6",
  ignore: !npx && Deno.env.get("CI") !== "true",
  sanitizeResources: false,
  async fn() {
    await runWalkThrough(["npx", "-y", "--", "deno@2.9.6"]);
  },
});

Deno.test("the walk-through stops at its first step when another program holds the port", async () => {
  const [, walk] = blocksAfter("## Walk-through");
  using dir = tempDir();
  await using other = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response("not here", { status: 404 }),
  );
  const walked = await new Deno.Command("bash", {
    args: ["-c", walkThrough(walk, other.addr.port, dir.path)],
    cwd: ROOT,
    env: {
      PATH: denoOnPath(dir.path, [Deno.execPath()]),
      DENO_KV_PATH: `${dir.path}/store/keys.db`,
    },
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.notEqual(walked.code, 0);
  // Nothing was created: the check came before the first key.
  await assert.rejects(Deno.stat(`${dir.path}/store/keys.db`));
});
