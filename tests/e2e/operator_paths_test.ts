/**
 * An operator's ordinary choices, made with the README's commands and no
 * flag edited: the store outside the checkout, TLS files in another folder,
 * HOST=localhost or ::1, PostgreSQL through localhost, a remote KV URL with
 * its token, backups anywhere and through stdout and stdin. The permissions
 * follow the configuration, and still grant nothing it does not name.
 */

import assert from "node:assert/strict";
import { until } from "../support/wait.ts";
import { SERVER_VARIABLES } from "../../lib/server/permissions.ts";
import {
  createKey,
  keys,
  makeTlsFiles,
  type RunResult,
  runTask,
  startServer,
  taskCommand,
  tempDir,
} from "../support/processes.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";

const ROUTE = "/api/v1/integration/connection";
const MAIN = new URL("../../main.ts", import.meta.url).pathname;
const ADMIN = new URL("../../admin.ts", import.meta.url).pathname;

/** The `--allow-KIND=` values of a running process, read from the OS. */
async function grantedTo(pid: number): Promise<Record<string, string[]>> {
  const words = (await Deno.readTextFile(`/proc/${pid}/cmdline`))
    .split("\0");
  const grants: Record<string, string[]> = {};
  for (const word of words) {
    assert.doesNotMatch(word, /^(-A|--allow-all|--allow-\w+)$/, word);
    const match = word.match(/^--allow-(\w+)=(.*)$/);
    if (match) grants[match[1]] = match[2].split(",").sort();
  }
  return grants;
}

Deno.test("the store outside the checkout, TLS files elsewhere and HOST=localhost work with deno task start and keys, and the server may touch nothing else", async () => {
  using checkout = tempDir();
  using root = tempDir();
  const store = `${root.path}/var/lib/integration/keys.db`;
  const tls = `${root.path}/etc/integration/tls`;
  await Deno.mkdir(tls, { recursive: true });
  await makeTlsFiles(tls);
  const env = {
    DENO_KV_PATH: store,
    TLS_CERT_FILE: `${tls}/cert.pem`,
    TLS_KEY_FILE: `${tls}/key.pem`,
    HOST: "localhost",
  };
  await using server = await startServer(checkout.path, env);
  const { key, id } = await createKey(checkout.path, "berlin", undefined, env);
  using client = Deno.createHttpClient({
    caCerts: [await Deno.readTextFile(`${tls}/ca.pem`)],
  });
  const response = await fetch(`https://localhost:${server.port}${ROUTE}`, {
    client,
    headers: { "X-API-Key": key },
  });
  assert.equal(response.status, 200);
  assert.equal((await response.json()).apiKeyId, id);

  // What the process may do is exactly what the configuration names.
  const granted = await grantedTo(server.process.pid);
  assert.deepEqual(granted, {
    net: ["localhost:0"],
    read: [
      `${root.path}/var/lib/integration`,
      env.TLS_CERT_FILE,
      env.TLS_KEY_FILE,
    ]
      .sort(),
    write: [`${root.path}/var/lib/integration`],
    env: [...SERVER_VARIABLES].sort(),
    // The host name `keys status` shows for each server.
    sys: ["hostname"],
  });
  // The folder the store made is private; nothing landed in the checkout.
  assert.equal(
    (await Deno.stat(`${root.path}/var/lib/integration`)).mode! & 0o777,
    0o700,
  );
  assert.deepEqual([...Deno.readDirSync(checkout.path)], []);
});

Deno.test("an existing folder the operator names for the store keeps its mode", async () => {
  using checkout = tempDir();
  using root = tempDir();
  await Deno.chmod(root.path, 0o755);
  await createKey(checkout.path, "a", undefined, {
    DENO_KV_PATH: `${root.path}/keys.db`,
  });
  assert.equal((await Deno.stat(root.path)).mode! & 0o777, 0o755);
  assert.equal((await Deno.stat(`${root.path}/keys.db`)).mode! & 0o777, 0o600);
});

Deno.test("HOST=::1 serves on the IPv6 loopback", async () => {
  using checkout = tempDir();
  await using server = await startServer(checkout.path, { HOST: "::1" });
  const response = await fetch(
    `http://[::1]:${server.port}/api/v1/health/live`,
  );
  await response.body?.cancel();
  assert.equal(response.status, 200);
  assert.match(server.output(), /"address":"http:\/\/\[::1\]:\d+"/);
});

Deno.test("keys export writes a file outside the checkout and to stdout, and import reads it back from stdin", async () => {
  using checkout = tempDir();
  using backups = tempDir();
  const env = { DENO_KV_PATH: `${backups.path}/store/keys.db` };
  const { id } = await createKey(checkout.path, "berlin", undefined, env);
  const file = `${backups.path}/keys.jsonl`;
  const toFile = await keys(checkout.path, ["export", file], env);
  assert.equal(toFile.code, 0, toFile.stderr);
  const toStdout = await keys(checkout.path, ["export", "-"], env);
  assert.equal(toStdout.code, 0, toStdout.stderr);
  const lines = toStdout.stdout.trim().split("\n");
  assert.match(lines[0], /"format":"integration-service-keys"/);
  assert.deepEqual(JSON.parse(lines.at(-1)!), {
    type: "end",
    keys: 1,
    audit: 1,
  });
  // The two exports differ only in their header's time.
  const fileLines = (await Deno.readTextFile(file)).trim().split("\n");
  assert.deepEqual(fileLines.slice(1), lines.slice(1));
  assert.equal(
    (await keys(checkout.path, ["export", "-", "--json"], env)).code,
    2,
    "export - with --json would mix the summary into the export",
  );

  const restored = { DENO_KV_PATH: `${backups.path}/restored/keys.db` };
  const child = taskCommand("keys", {
    cwd: checkout.path,
    args: ["import", "-"],
    env: restored,
    stdin: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(toStdout.stdout));
  await writer.close();
  const imported = await child.output();
  assert.equal(imported.code, 0, new TextDecoder().decode(imported.stderr));
  const list = await keys(checkout.path, ["list", "--json"], restored);
  assert.deepEqual(JSON.parse(list.stdout).map((k: { id: number }) => k.id), [
    id,
  ]);
});

Deno.test({
  name:
    "PostgreSQL reached through localhost serves keys with the start and keys tasks",
  ignore: NO_DATABASE,
  async fn() {
    await using db = await freshDatabase();
    const url = new URL(db.url);
    url.hostname = "localhost";
    const env = { DATABASE_URL: url.href };
    using checkout = tempDir();
    const { key, id } = await createKey(checkout.path, "a", undefined, env);
    await using server = await startServer(checkout.path, env);
    const response = await fetch(`${server.url}${ROUTE}`, {
      headers: { "X-API-Key": key },
    });
    assert.equal(response.status, 200);
    assert.equal((await response.json()).apiKeyId, id);
    const granted = await grantedTo(server.process.pid);
    assert.ok(
      granted.net.includes(`localhost:${url.port}`),
      granted.net.join(),
    );
    assert.equal(granted.read, undefined, "no file access with PostgreSQL");
  },
});

/**
 * A stand-in for a remote KV server at `url(scheme)`: it notes each
 * request's Authorization header in `seen` and answers 503, not being a KV
 * Connect server: enough to show a request got there, with its token.
 */
function remoteKv() {
  const seen: string[] = [];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request) => {
      seen.push(request.headers.get("authorization") ?? "");
      return new Response("no database here", { status: 503 });
    },
  );
  return {
    seen,
    url: (scheme = "http") =>
      `${scheme}://127.0.0.1:${server.addr.port}/databases/1/connect`,
    [Symbol.asyncDispose]: () => server[Symbol.asyncDispose](),
  };
}

/** keys list against a remote KV that is none: it fails, not for want of a permission. */
async function listRemote(
  cwd: string,
  env: Record<string, string>,
): Promise<RunResult> {
  const listed = await keys(cwd, ["list"], env);
  assert.equal(listed.code, 1, listed.stderr);
  assert.doesNotMatch(listed.stderr, /permission|NotCapable|Requires/i);
  return listed;
}

Deno.test("a remote KV URL is reached with DENO_KV_ACCESS_TOKEN, by the server and by the console", async () => {
  const token = `token-${crypto.randomUUID()}`;
  await using remote = remoteKv();
  const { seen } = remote;
  using checkout = tempDir();
  const env = { DENO_KV_PATH: remote.url(), DENO_KV_ACCESS_TOKEN: token };
  await listRemote(checkout.path, env);
  assert.ok(seen.includes(`Bearer ${token}`), "the console sent the token");
  seen.length = 0;
  const server = taskCommand("start", {
    cwd: checkout.path,
    env: { ...env, PORT: "0" },
  }).spawn();
  try {
    await until(() => seen.length > 0, "the server's first call to the store");
    assert.ok(seen.includes(`Bearer ${token}`), "the server sent the token");
  } finally {
    try {
      server.kill();
    } catch {
      // It gave up on the store already.
    }
    const out = await server.output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.doesNotMatch(stderr, /permission|NotCapable|Requires/i);
    assert.ok(!stderr.includes(token), "the token is never printed");
  }
});

Deno.test("a store path with a space is refused by the start task with the exact command that starts it, and that command works", async () => {
  using checkout = tempDir();
  using root = tempDir();
  const env = { DENO_KV_PATH: `${root.path}/my store/keys.db`, PORT: "0" };
  const refused = await runTask("start", { cwd: checkout.path, env });
  assert.equal(refused.code, 1);
  const lines = refused.stderr.trim().split("\n");
  assert.equal(lines.length, 1, refused.stderr);
  assert.match(lines[0], /DENO_KV_PATH/);
  const command = lines[0].match(/run: (deno run .*main\.ts)/)?.[1];
  assert.ok(command, lines[0]);
  // Run it as printed, in a shell, with deno being this deno and main.ts this one.
  const child = new Deno.Command("sh", {
    args: [
      "-c",
      command.replace(/^deno /, `exec '${Deno.execPath()}' `).replace(
        / main\.ts$/,
        ` '${MAIN}'`,
      ),
    ],
    cwd: checkout.path,
    env,
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const first = await reader.read();
  child.kill();
  await child.status;
  await reader.cancel();
  await child.stderr.cancel();
  assert.match(first.value ?? "", /"msg":"listening"/);
});

Deno.test("run without the task's permissions, the server and the console name the variable and the command that grants them", async () => {
  using checkout = tempDir();
  using root = tempDir();
  const env = { DENO_KV_PATH: `${root.path}/keys.db`, PORT: "0" };
  // The fixed flags an operator might have copied from an older README.
  const server = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-q",
      "--no-prompt",
      `--allow-env=${SERVER_VARIABLES.join(",")}`,
      "--allow-net=0.0.0.0:0",
      "--allow-read=./data",
      "--allow-write=./data",
      MAIN,
    ],
    cwd: checkout.path,
    env,
  }).output();
  const serverError = new TextDecoder().decode(server.stderr).trim();
  assert.equal(server.code, 1);
  assert.equal(serverError.split("\n").length, 1, serverError);
  assert.match(serverError, /DENO_KV_PATH/);
  assert.match(serverError, /deno task start/);

  const admin = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-q",
      "--no-prompt",
      "--allow-env",
      `--allow-read=${root.path}`,
      `--allow-write=${root.path}`,
      ADMIN,
      "export",
      `${checkout.path}/elsewhere.jsonl`,
    ],
    cwd: checkout.path,
    env,
  }).output();
  const adminError = new TextDecoder().decode(admin.stderr).trim();
  assert.equal(admin.code, 1);
  assert.equal(adminError.split("\n").length, 1, adminError);
  assert.match(adminError, /\(for FILE\)/);
  assert.match(adminError, /deno task keys/);
});

Deno.test("a path with a comma, which Deno's permission flags cannot name, is refused in one line naming the variable", async () => {
  using checkout = tempDir();
  const result = await runTask("start", {
    cwd: checkout.path,
    env: { PORT: "0", DENO_KV_PATH: `${checkout.path}/a,b/keys.db` },
  });
  assert.equal(result.code, 1);
  assert.match(result.stderr.trim(), /^DENO_KV_PATH names .*comma[^\n]*$/);
});

Deno.test("a keys launcher killed outright does not leave its console running", async () => {
  using checkout = tempDir();
  const launcher = taskCommand("keys", {
    cwd: checkout.path,
    args: ["import", "-"],
    stdin: "piped",
  }).spawn();
  // The console is the launcher's child; wait until it runs.
  const childrenFile = `/proc/${launcher.pid}/task/${launcher.pid}/children`;
  let admin = 0;
  await until(async () => {
    admin = Number(
      (await Deno.readTextFile(childrenFile)).trim().split(/\s+/)[0],
    ) || 0;
    return admin > 0;
  }, "the launcher to start the console");
  launcher.kill("SIGKILL");
  await launcher.status;
  await launcher.stdin.abort().catch(() => {});
  // The console looks for its parent every 50 ms (admin.ts): waited for
  // until it is gone, as a busy machine may run that look late.
  await until(async () => {
    try {
      return (await Deno.readTextFile(`/proc/${admin}/stat`)).includes(
        ") Z ",
      );
    } catch {
      return true;
    }
  }, "the console to end after its launcher");
});

Deno.test("a HOST or database host that Deno's permission flags cannot name is refused in one line naming the variable, not by Deno's own error", async () => {
  using checkout = tempDir();
  for (
    const [env, variable] of [
      [{ HOST: "a..b" }, "HOST"],
      [{ HOST: "[::1" }, "HOST"],
      [{ DATABASE_URL: "postgres://u@a..b:5432/db" }, "DATABASE_URL"],
      [{ DATABASE_URL: "postgres://u@exa%6dple:5432/db" }, "DATABASE_URL"],
    ] as const
  ) {
    const started = await runTask("start", {
      cwd: checkout.path,
      env: { PORT: "0", ...env },
    });
    assert.equal(started.code, 1, started.stderr);
    const lines = started.stderr.trim().split("\n");
    assert.equal(lines.length, 1, started.stderr);
    assert.match(lines[0], new RegExp(`^${variable}\\b`), lines[0]);
    assert.doesNotMatch(lines[0], /Stack backtrace|invalid host/);
    if (variable === "DATABASE_URL") {
      const listed = await keys(checkout.path, ["list"], env);
      assert.equal(listed.code, 1, listed.stderr);
      assert.match(listed.stderr.trim(), /^DATABASE_URL\b[^\n]*$/);
    }
  }
  assert.deepEqual([...Deno.readDirSync(checkout.path)], []);
});

Deno.test("run by hand with a store path with a space, the console names deno task keys, which passes any path, and only settings an operator can change", async () => {
  using checkout = tempDir();
  using root = tempDir();
  const env = { DENO_KV_PATH: `${root.path}/my store/keys.db` };
  // The launcher itself passes the path without a shell.
  await createKey(checkout.path, "a", undefined, env);
  const admin = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-q", "--no-prompt", "--allow-env", ADMIN, "list"],
    cwd: checkout.path,
    env,
  }).output();
  const message = new TextDecoder().decode(admin.stderr).trim();
  assert.equal(admin.code, 1);
  assert.equal(message.split("\n").length, 1, message);
  assert.match(message, /deno task keys/);
  // A printed deno run command would lose the console's own arguments.
  assert.doesNotMatch(message, /cannot pass a path with spaces|run: deno run/);
  assert.doesNotMatch(message, /change the audit log/);
});

Deno.test("keys import and export with an empty FILE are usage errors in one line, not Deno's own error", async () => {
  using checkout = tempDir();
  using root = tempDir();
  const env = { DENO_KV_PATH: `${root.path}/keys.db` };
  for (const command of ["import", "export"]) {
    const result = await keys(checkout.path, [command, ""], env);
    assert.equal(result.code, 2, result.stderr);
    const lines = result.stderr.trim().split("\n");
    assert.equal(lines.length, 1, result.stderr);
    assert.match(lines[0], /FILE/);
  }
});

Deno.test("a remote KV URL with an upper-case scheme is reached as a URL, not taken for a folder", async () => {
  await using remote = remoteKv();
  using checkout = tempDir();
  const env = {
    DENO_KV_PATH: remote.url("HTTP"),
    DENO_KV_ACCESS_TOKEN: `token-${crypto.randomUUID()}`,
  };
  const listed = await listRemote(checkout.path, env);
  assert.ok(
    remote.seen.includes(`Bearer ${env.DENO_KV_ACCESS_TOKEN}`),
    listed.stderr,
  );
  assert.deepEqual([...Deno.readDirSync(checkout.path)], []);
});

Deno.test("keys export to a FILE with a backslash writes it in the folder the task granted, where a backslash is part of the name", async () => {
  using checkout = tempDir();
  using backups = tempDir();
  const env = { DENO_KV_PATH: `${backups.path}/store/keys.db` };
  await createKey(checkout.path, "a", undefined, env);
  const file = `${backups.path}/a\\b.jsonl`;
  const result = await keys(checkout.path, ["export", file], env);
  assert.equal(result.code, 0, result.stderr);
  assert.ok((await Deno.stat(file)).isFile);
});

Deno.test("a store path with a glob character is not expanded by the task runner: the start refuses it with the exact command", async () => {
  using checkout = tempDir();
  using root = tempDir();
  // A folder the glob would match, were the task runner to expand it.
  await Deno.mkdir(`${root.path}/store-a`);
  const env = { DENO_KV_PATH: `${root.path}/store-*/keys.db`, PORT: "0" };
  const refused = await runTask("start", { cwd: checkout.path, env });
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /DENO_KV_PATH/);
  assert.match(refused.stderr, /run: deno run /);
  assert.deepEqual([...Deno.readDirSync(`${root.path}/store-a`)], []);
});
