/**
 * The three ways to run the server (the start task, the compiled binary,
 * the Docker image) must grant the same permissions and run the same
 * entrypoint. Docker and `deno compile` cannot run here; their definitions can.
 */

import assert from "node:assert/strict";
import { taskArgs } from "./_helpers.ts";

const root = new URL("../", import.meta.url);
const dockerfile = await Deno.readTextFile(new URL("Dockerfile", root));

function permissions(args: string[]): string[] {
  return args.filter((a) => a.startsWith("--allow-")).sort();
}

function entrypoint(args: string[]): string {
  return args.filter((a) => a.endsWith(".ts")).map((a) => a.split("/").pop())
    .join(" ");
}

Deno.test("the Docker image runs main.ts with exactly the start task's permissions", () => {
  const cmd = dockerfile.match(/^CMD (\[.*\])$/m);
  assert.ok(cmd, "the Dockerfile has a CMD in exec form");
  const args = JSON.parse(cmd[1]) as string[];
  assert.deepEqual(permissions(args), permissions(taskArgs("start")));
  assert.equal(entrypoint(args), "main.ts");
  assert.equal(entrypoint(taskArgs("start")), "main.ts");
});

Deno.test("the compile task builds main.ts with exactly the start task's permissions and KV enabled", () => {
  const args = taskArgs("compile");
  assert.equal(args[0], "compile");
  assert.deepEqual(permissions(args), permissions(taskArgs("start")));
  assert.equal(entrypoint(args), "main.ts");
  assert.ok(args.includes("--unstable-kv"));
});

Deno.test("the Docker image is pinned, runs as the deno user and checks a health route", () => {
  const from = dockerfile.match(/^FROM (\S+)$/m)?.[1] ?? "";
  assert.match(from, /^denoland\/deno:\d+\.\d+\.\d+/);
  assert.match(dockerfile, /^USER deno$/m);
  assert.match(dockerfile, /^HEALTHCHECK .*\n?.*\/api\/v1\/health\/live/m);
});
