/**
 * The three ways to run the server, `deno task start`, the compiled binary
 * (`deno task compile`) and the Docker image, must grant the same
 * permissions to the same entrypoint. They are derived once, from the
 * configuration, by lib/server/permissions.ts: the start task asks
 * scripts/permissions.ts for them, the image runs the task, and
 * scripts/compile.ts derives them when it builds. Docker and `deno compile`
 * cannot run here (no engine; the compile runtime is downloaded from a host
 * this machine cannot reach), so their definitions are read and compared.
 *
 * What "the same" means:
 * - Permission flags (`--allow-*`, `--deny-*`) are compared as sets, and so
 *   are the comma-separated values of each, so order does not matter.
 * - The image runs the very `deno run` of the start task, so its other flags
 *   (`-q`, `--env-file`) must match too.
 * - The compile task must not take `--env-file`: `deno compile` embeds the
 *   .env of the machine that builds, secrets included, into the binary. The
 *   binary reads its settings from the environment it is started in. `-q`
 *   only quiets the build, so it is left to the task.
 */

import assert from "node:assert/strict";
import { readConfig, readStoreLocation } from "../../lib/server/config.ts";
import { compileArgs } from "../../scripts/compile.ts";
import { localGraph } from "../support/module_graph.ts";
import { startServer, taskArgs, tempDir } from "../support/processes.ts";

const ROOT = new URL("../../", import.meta.url);
const read = (path: string) => Deno.readTextFile(new URL(path, ROOT));
const DENO_JSON = JSON.parse(await read("deno.json")) as {
  unstable?: string[];
  tasks: Record<string, string>;
};
const DOCKERFILE = dockerInstructions(await read("Dockerfile"));
const DOCKERIGNORE = (await read(".dockerignore")).split("\n")
  .map((line) => line.trim())
  .filter((line) => line !== "" && !line.startsWith("#"));

interface Instruction {
  keyword: string;
  args: string;
}

/** Dockerfile instructions, with continued lines joined and comments dropped. */
function dockerInstructions(text: string): Instruction[] {
  const instructions: Instruction[] = [];
  let current = "";
  for (const raw of text.split("\n")) {
    const line = raw.trimEnd();
    if (/^\s*#/.test(line) || (current === "" && line.trim() === "")) continue;
    if (line.endsWith("\\")) {
      current += line.slice(0, -1) + " ";
      continue;
    }
    const whole = (current + line).trim();
    current = "";
    const match = whole.match(/^(\w+)\s+(.*)$/s);
    assert.ok(match, `not an instruction: ${whole}`);
    instructions.push({ keyword: match[1].toUpperCase(), args: match[2] });
  }
  return instructions;
}

function all(keyword: string): string[] {
  return DOCKERFILE.filter((i) => i.keyword === keyword).map((i) => i.args);
}

/** The instruction's exec form (a JSON array), which runs without a shell. */
function execForm(args: string): string[] {
  const words = JSON.parse(args);
  assert.ok(
    Array.isArray(words) && words.every((w) => typeof w === "string"),
    `not an exec-form command: ${args}`,
  );
  return words;
}

interface DenoCommand {
  subcommand: string;
  /** Each permission flag with its comma-separated values sorted. */
  permissions: string[];
  /** Every other flag, values joined with "=". */
  flags: string[];
  entrypoint: string;
  scriptArgs: string[];
}

const FLAGS_WITH_A_SEPARATE_VALUE = new Set(["--output", "-o", "--target"]);

function denoCommand(words: string[]): DenoCommand {
  assert.equal(words[0], "deno", `runs deno directly: ${words.join(" ")}`);
  const [, subcommand, ...rest] = words;
  const permissions: string[] = [];
  const flags: string[] = [];
  let at = 0;
  for (; at < rest.length && rest[at].startsWith("-"); at++) {
    let flag = rest[at];
    if (FLAGS_WITH_A_SEPARATE_VALUE.has(flag)) flag += `=${rest[++at]}`;
    // Short and blanket forms would slip past a comparison of --allow-* flags.
    assert.doesNotMatch(
      flag,
      /^-[ARWNESP]$|^--allow-all$|^--allow-\w+$/,
      `${flag}: grant permissions with --allow-NAME=LIST`,
    );
    if (/^--(allow|deny)-/.test(flag)) {
      const [name, list] = flag.split("=");
      permissions.push(`${name}=${list.split(",").sort().join(",")}`);
    } else flags.push(flag);
  }
  return {
    subcommand,
    permissions: permissions.sort(),
    flags: flags.sort(),
    entrypoint: rest[at],
    scriptArgs: rest.slice(at + 1),
  };
}

/** The start task as the task runner runs it for the configuration `env`. */
function start(env: Record<string, string> = {}): DenoCommand {
  using dir = tempDir();
  const command = denoCommand([
    "deno",
    ...taskArgs("start", { cwd: dir.path, env }),
  ]);
  return { ...command, entrypoint: command.entrypoint.replace(/^.*\//, "") };
}

/** Configurations an operator writes: the defaults, and paths, hosts and URLs elsewhere. */
const CONFIGURATIONS: Record<string, string>[] = [
  {},
  {
    DENO_KV_PATH: "/var/lib/integration/keys.db",
    HOST: "localhost",
    PORT: "8443",
    TLS_CERT_FILE: "/etc/integration/tls/cert.pem",
    TLS_KEY_FILE: "/etc/integration/tls/key.pem",
  },
  { HOST: "::1", DATABASE_URL: "postgres://app:secret@localhost:5433/keys" },
  {
    DENO_KV_PATH: "https://kv.example.com/databases/1/connect",
    HOST: "10.0.0.7",
  },
];

Deno.test("the Docker image runs the start task itself, so its permissions are the task's", () => {
  const cmds = all("CMD");
  assert.equal(cmds.length, 1, "one CMD");
  assert.deepEqual(execForm(cmds[0]), ["deno", "task", "-q", "start"]);
  assert.equal(start().entrypoint, "main.ts");
  // The base image's ENTRYPOINT (tini) must stay, to pass SIGTERM on.
  assert.deepEqual(all("ENTRYPOINT"), []);
});

Deno.test("the binary gets the permissions the start task derives for the same configuration, its V8 flags, KV and no build-time .env", () => {
  for (const env of CONFIGURATIONS) {
    const task = start(env);
    const compile = denoCommand([
      "deno",
      ...compileArgs(DENO_JSON, (name) => env[name]),
    ]);
    assert.equal(compile.subcommand, "compile");
    assert.deepEqual(
      compile.permissions,
      task.permissions,
      JSON.stringify(env),
    );
    assert.ok(task.permissions.length > 0, "the start task grants permissions");
    assert.equal(compile.entrypoint, task.entrypoint);
    assert.deepEqual(compile.scriptArgs, []);
    assert.ok(compile.flags.includes("--unstable-kv"), "--unstable-kv");
    assert.ok(compile.flags.includes("--unstable-net"), "--unstable-net");
    const v8 = (c: DenoCommand) =>
      c.flags.filter((f) => f.startsWith("--v8-flags"));
    assert.deepEqual(v8(compile), v8(task));
    assert.ok(v8(task).length > 0, "the start task sets its V8 flags");
    assert.ok(
      compile.flags.includes("--output=dist/integration-service"),
      compile.flags.join(" "),
    );
    assert.ok(
      !compile.flags.some((f) => f.startsWith("--env-file")),
      "deno compile would embed the builder's .env in the binary",
    );
  }
});

Deno.test("without DENO_KV_PATH the server keeps its keys on disk, inside the folder every variant may write", () => {
  const unset = () => undefined;
  const location = readStoreLocation(unset);
  assert.deepEqual(readConfig(unset).store, location);
  assert.equal(location.kind, "kv");
  const path = location.kind === "kv" ? location.path : "";
  assert.notEqual(path, ":memory:");
  const relative = path.replace(/^\.\//, "");
  const variants = {
    start: start(),
    compile: denoCommand(["deno", ...compileArgs(DENO_JSON, unset)]),
  };
  for (const [name, command] of Object.entries(variants)) {
    const writable = command.permissions
      .filter((p) => p.startsWith("--allow-write="))
      .flatMap((p) => p.slice("--allow-write=".length).split(","))
      .map((p) => p.replace(/^\.\//, "").replace(/\/$/, ""));
    assert.ok(
      writable.some((folder) => relative.startsWith(`${folder}/`)),
      `${name}: ${path} is outside --allow-write=${writable.join(",")}`,
    );
  }
});

Deno.test("the image keeps the store on the /data volume, runs as the deno user and exposes the default port", () => {
  const user = all("USER").at(-1);
  assert.equal(user, "deno");
  const volumes = all("VOLUME").flatMap((v) =>
    v.startsWith("[") ? execForm(v) : v.split(/\s+/)
  );
  assert.ok(volumes.includes("/data"), `VOLUME ${volumes.join(" ")}`);
  const workdir = all("WORKDIR").at(-1);
  assert.ok(workdir?.startsWith("/"), "an absolute WORKDIR");
  const env = all("ENV").join(" ");
  const path = env.match(/\bDENO_KV_PATH=(\S+)/)?.[1];
  assert.ok(
    path?.startsWith("/data/"),
    `ENV DENO_KV_PATH=${path} is on the volume`,
  );
  // The start task derives its permissions from DENO_KV_PATH, so /data is what it may write.
  assert.ok(
    start({ DENO_KV_PATH: path! }).permissions.includes("--allow-write=/data"),
  );
  const port = String(readConfig(() => undefined).port);
  assert.ok(
    all("EXPOSE").some((e) => e.split(/\s+/).includes(port)),
    `EXPOSE ${port}`,
  );
});

Deno.test("the base image is the official Deno image at a pinned version, never latest", () => {
  const images = all("FROM").map((f) => f.split(/\s+/)[0]);
  assert.ok(images.length > 0);
  for (const image of images) {
    assert.match(image, /^denoland\/deno:/);
    const tag = image.split(":")[1];
    assert.doesNotMatch(tag, /latest/);
    assert.match(tag, /\d+\.\d+\.\d+|@sha256:[0-9a-f]{64}$/);
  }
});

/** Files below the project root that an entrypoint loads, static and dynamic imports alike. */
async function localModules(entrypoint: string): Promise<string[]> {
  return [...(await localGraph(entrypoint)).keys()];
}

function ignored(path: string): boolean {
  return DOCKERIGNORE.some((pattern) => {
    const p = pattern.replace(/^\//, "").replace(/\/$/, "");
    return path === p || path.startsWith(`${p}/`);
  });
}

Deno.test("the image copies every module the server and the console load, and caches from the lockfile first", async () => {
  const copied = all("COPY").map((c) =>
    c.split(/\s+/).filter((w) => !w.startsWith("--"))
  )
    .flatMap((words) => words.slice(0, -1));
  const needed = new Set([
    ...await localModules("main.ts"),
    ...await localModules("admin.ts"),
    // The start and keys tasks run these before the server and the console.
    ...await localModules("scripts/permissions.ts"),
    ...await localModules("scripts/keys.ts"),
    "deno.json",
    "deno.lock",
  ]);
  assert.ok(needed.has("lib/store/open.ts") && needed.has("admin.ts"));
  for (const file of needed) {
    assert.ok(
      copied.some((src) =>
        src === file || (src.endsWith("/") && file.startsWith(src))
      ),
      `${file} is not copied into the image`,
    );
    assert.ok(!ignored(file), `.dockerignore leaves out ${file}`);
  }
  const order = DOCKERFILE.map((i) => `${i.keyword} ${i.args}`);
  const install = order.findIndex((l) => /^RUN deno (install|cache)\b/.test(l));
  assert.ok(install > 0, "a RUN step caches the dependencies");
  assert.match(order[install], /--frozen/);
  assert.ok(
    order.findIndex((l) => /^COPY .*\bdeno\.lock\b/.test(l)) < install,
    "deno.json and deno.lock are copied before the dependency step",
  );
  // The start command has no --unstable-kv: it relies on deno.json, which the image copies.
  assert.ok(DENO_JSON.unstable?.includes("kv"), 'deno.json "unstable": ["kv"]');
  // REUSE_PORT: Deno.listen's reusePort.
  assert.ok(
    DENO_JSON.unstable?.includes("net"),
    'deno.json "unstable": ["net"]',
  );
});

Deno.test(".dockerignore keeps the store, secrets, history and tests out of the build context", () => {
  for (
    const path of [
      "data/keys.db",
      ".env",
      ".git/config",
      "tests/e2e/admin_test.ts",
    ]
  ) {
    assert.ok(ignored(path), `${path} would be sent to the Docker build`);
  }
});

Deno.test("the HEALTHCHECK command passes while the server runs and fails once it has stopped", async () => {
  const checks = all("HEALTHCHECK");
  assert.equal(checks.length, 1);
  const command = checks[0].match(/\bCMD\s+(\[.*\])\s*$/s);
  assert.ok(command, "HEALTHCHECK … CMD [exec form]");
  const words = execForm(command[1]);
  assert.deepEqual(words.slice(0, 2), ["deno", "eval"]);
  const path = words[2].match(/\/api\/v1\/[\w/.-]+/)?.[0];
  assert.ok(path, "the check names a route");

  using dir = tempDir();
  const server = await startServer(dir.path);
  const healthCheck = async () => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: words.slice(1),
      cwd: dir.path,
      env: { PORT: String(server.port) },
      stdout: "null",
      stderr: "null",
    }).output();
    return out.code;
  };
  try {
    const direct = await fetch(`${server.url}${path}`);
    await direct.body?.cancel();
    assert.equal(direct.status, 200, `GET ${path}`);
    assert.equal(await healthCheck(), 0);
  } finally {
    await server.stop();
  }
  assert.notEqual(await healthCheck(), 0);
});
