/**
 * `keys update --rate` at a terminal on a key whose rotation's other key
 * still works in its overlap: the question names that key before anything
 * is written, a decline changes neither, and a yes changes both.
 */

import assert from "node:assert/strict";
import {
  keys,
  rotateWithOverlap,
  type RunResult,
  taskArgs,
  tempDir,
} from "../support/processes.ts";

const SCRIPT = await (async () => {
  try {
    return (await new Deno.Command("script", { args: ["--version"] }).output())
      .success;
  } catch {
    return false;
  }
})();

/** `deno task keys ARGS` under script(1), so at a terminal, typing `input`. */
async function atTerminal(
  cwd: string,
  args: string[],
  input: string,
): Promise<RunResult> {
  const quote = (word: string) => `'${word.replaceAll("'", `'\\''`)}'`;
  const command = [Deno.execPath(), ...taskArgs("keys"), ...args].map(quote)
    .join(" ");
  const { NO_COLOR: _, ...env } = Deno.env.toObject();
  const child = new Deno.Command("script", {
    args: ["-qec", `stty cols 200 rows 40; ${command}`, "/dev/null"],
    cwd,
    env: { ...env, TERM: "xterm" },
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(input));
  await writer.close();
  const out = await child.output();
  const decoder = new TextDecoder();
  return {
    code: out.code,
    stdout: decoder.decode(out.stdout).replaceAll("\r\n", "\n"),
    stderr: decoder.decode(out.stderr),
  };
}

/** The rate limit of key `id` as `keys show --json` gives it. */
async function limitOf(cwd: string, id: number): Promise<unknown> {
  const shown = await keys(cwd, ["show", String(id), "--json"]);
  assert.equal(shown.code, 0, shown.stderr);
  return JSON.parse(shown.stdout).rateLimit;
}

Deno.test({
  name:
    "at a terminal, keys update --rate on the new key of an overlap asks first, naming the old key it changes too: n changes neither, y both",
  ignore: !SCRIPT,
  async fn() {
    using dir = tempDir();
    const created = await keys(dir.path, [
      "create",
      "--name",
      "berlin-erp",
      "--email",
      "it@example.com",
      "--rate",
      "10/h",
      "--json",
    ]);
    assert.equal(created.code, 0, created.stderr);
    const first: { id: number } = JSON.parse(created.stdout);
    const second = await rotateWithOverlap(dir.path, "berlin-erp", "1h");
    const ten = { count: 10, windowSeconds: 3600 };
    const args = ["update", String(second.id), "--rate", "5/h"];

    const declined = await atTerminal(dir.path, args, "n\n");
    assert.notEqual(declined.code, 0, declined.stdout);
    assert.match(
      declined.stdout,
      new RegExp(
        `Key ${first.id} "berlin-erp", which it replaced, still works in their overlap and gets it too[^\\n]*\\[y/N\\]`,
      ),
    );
    assert.match(declined.stdout, /rate limit was not changed/);
    assert.deepEqual(await limitOf(dir.path, first.id), ten);
    assert.deepEqual(await limitOf(dir.path, second.id), ten);

    const accepted = await atTerminal(dir.path, args, "y\n");
    assert.equal(accepted.code, 0, accepted.stdout);
    assert.match(accepted.stdout, new RegExp(`and so has key ${first.id}\\b`));
    const five = { count: 5, windowSeconds: 3600 };
    assert.deepEqual(await limitOf(dir.path, first.id), five);
    assert.deepEqual(await limitOf(dir.path, second.id), five);
  },
});
