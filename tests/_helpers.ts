/**
 * Test helpers: run the real tasks from deno.json as child processes, with
 * exactly the permissions the tasks declare, in a throwaway working folder.
 */

import assert from "node:assert/strict";
import { validateResponse } from "./_openapi_validator.ts";

const ROOT = new URL("../", import.meta.url);
const DENO_JSON = JSON.parse(
  await Deno.readTextFile(new URL("deno.json", ROOT)),
) as { tasks: Record<string, string> };

/** The arguments of a deno.json task after `deno`, with its entrypoint made absolute. */
export function taskArgs(task: string): string[] {
  const command = DENO_JSON.tasks[task];
  assert(command, `deno.json has no task ${task}`);
  const [deno, ...args] = command.split(/\s+/);
  assert.equal(deno, "deno", `task ${task} must run deno directly`);
  return args.map((arg) =>
    /^[\w/]+\.ts$/.test(arg) ? new URL(arg, ROOT).pathname : arg
  );
}

/** A fresh working folder, removed when the test's `using` scope ends. */
export function tempDir(): { path: string } & Disposable {
  const path = Deno.makeTempDirSync({ prefix: "isk_test_" });
  return {
    path,
    [Symbol.dispose]() {
      Deno.removeSync(path, { recursive: true });
    },
  };
}

/** What a finished console command printed. */
export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `deno task keys ARGS` in `cwd`. */
export function keys(
  cwd: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<RunResult> {
  return runTask("keys", { cwd, args, env });
}

/** Runs a deno.json task to completion in `cwd`. */
export async function runTask(
  task: string,
  options: { cwd: string; args?: string[]; env?: Record<string, string> },
): Promise<RunResult> {
  const { cwd, args = [], env = {} } = options;
  const out = await new Deno.Command(Deno.execPath(), {
    args: [...taskArgs(task), ...args],
    cwd,
    env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  return {
    code: out.code,
    stdout: decoder.decode(out.stdout),
    stderr: decoder.decode(out.stderr),
  };
}

/** Creates a key through the console and returns it with its id. */
export async function createKey(
  cwd: string,
  name: string,
  email = `${name}@example.com`,
  env: Record<string, string> = {},
): Promise<{ id: number; key: string }> {
  const result = await keys(cwd, [
    "create",
    "--name",
    name,
    "--email",
    email,
    "--json",
  ], env);
  assert.equal(result.code, 0, result.stderr);
  const { id, key } = JSON.parse(result.stdout);
  return { id, key };
}

/** The keys of {@linkcode sampleInstallation}, by what became of them. */
export interface SampleInstallation {
  valid: string;
  revoked: string;
  rotatedOld: string;
  rotatedNew: string;
}

/**
 * An installation made with the console as an admin would: ids 1-3 created,
 * 2 revoked, 3 rotated into 4. Keys: berlin-erp (ops@), hamburg-erp (it@),
 * munich-erp (edv@example.com).
 */
export async function sampleInstallation(
  cwd: string,
  env: Record<string, string> = {},
): Promise<SampleInstallation> {
  const valid = await createKey(cwd, "berlin-erp", "ops@example.com", env);
  const revoked = await createKey(cwd, "hamburg-erp", "it@example.com", env);
  const rotated = await createKey(cwd, "munich-erp", "edv@example.com", env);
  const revoke = await keys(
    cwd,
    ["revoke", "hamburg-erp", "--reason", "machine decommissioned"],
    env,
  );
  assert.equal(revoke.code, 0, revoke.stderr);
  const rotate = await keys(cwd, ["rotate", "munich-erp", "--json"], env);
  assert.equal(rotate.code, 0, rotate.stderr);
  return {
    valid: valid.key,
    revoked: revoked.key,
    rotatedOld: rotated.key,
    rotatedNew: JSON.parse(rotate.stdout).key,
  };
}

/** A server started from the `start` task, listening on a free port. */
export interface ServerProcess extends AsyncDisposable {
  /** `http://127.0.0.1:PORT` */
  url: string;
  port: number;
  process: Deno.ChildProcess;
  /** Everything printed so far on stdout and stderr. */
  output(): string;
  /** Sends a signal and waits for the exit code. */
  stop(signal?: Deno.Signal): Promise<number>;
}

/**
 * Starts the server with the `start` task's permissions in `cwd`.
 * `openFiles` runs it under `ulimit -n` of that many descriptors.
 */
export async function startServer(
  cwd: string,
  env: Record<string, string> = {},
  task = "start",
  options: { keepOutput?: boolean; openFiles?: number } = {},
): Promise<ServerProcess> {
  // A benchmark drains millions of log lines: keep only what finds the port.
  const keep = options.keepOutput ?? true;
  const limited = options.openFiles !== undefined;
  const child = new Deno.Command(limited ? "bash" : Deno.execPath(), {
    args: limited
      ? [
        "-c",
        `ulimit -n ${options.openFiles} && exec "$0" "$@"`,
        Deno.execPath(),
        ...taskArgs(task),
      ]
      : taskArgs(task),
    cwd,
    env: { PORT: "0", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let text = "";
  let port = 0;
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      if (keep || port === 0) text += chunk;
    }
  };
  const done = Promise.all([collect(child.stdout), collect(child.stderr)]);
  const deadline = Date.now() + 15_000;
  while (port === 0) {
    const match = text.match(
      /"msg":"listening","address":"https?:\/\/[^"]*:(\d+)"/,
    );
    if (match) port = Number(match[1]);
    else if (Date.now() > deadline) {
      child.kill();
      await done;
      throw new Error(`the server did not start:\n${text}`);
    } else await new Promise((r) => setTimeout(r, 20));
  }
  let exit: Promise<number> | undefined;
  const stop = (signal: Deno.Signal = "SIGTERM") => {
    if (exit === undefined) {
      try {
        child.kill(signal);
      } catch {
        // already gone
      }
      exit = Promise.all([child.status, done]).then(([s]) => s.code);
    }
    return exit;
  };
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    process: child,
    output: () => text,
    stop,
    async [Symbol.asyncDispose]() {
      await stop();
    },
  };
}

/**
 * fetch() for the service: every answer is validated against openapi.json
 * (throwing on any breach) and handed back as an equivalent Response. The
 * suite receives its responses through here, so the document cannot drift
 * from what the service really answers.
 */
export async function request(
  url: string,
  init: RequestInit & { client?: Deno.HttpClient } = {},
): Promise<Response> {
  const response = await fetch(url, init);
  const body = await response.text();
  const method = init.method ?? "GET";
  validateResponse({ method, path: new URL(url).pathname }, {
    status: response.status,
    headers: response.headers,
    body,
  });
  const empty = method === "HEAD" || [204, 304].includes(response.status);
  return new Response(empty ? null : body, {
    status: response.status,
    headers: response.headers,
  });
}

/** Validates a response the handler returned directly, as `request()` does. */
export async function validated(
  request: Request,
  response: Response,
): Promise<Response> {
  const body = await response.text();
  validateResponse({
    method: request.method,
    path: new URL(request.url).pathname,
  }, {
    status: response.status,
    headers: response.headers,
    body,
  });
  const empty = request.method === "HEAD" ||
    [204, 304].includes(response.status);
  return new Response(empty ? null : body, {
    status: response.status,
    headers: response.headers,
  });
}

/** GETs the connection route with a key; returns status, headers and body. */
export async function check(
  url: string,
  key?: string,
): Promise<{ status: number; headers: Headers; body: string }> {
  const response = await request(`${url}/api/v1/integration/connection`, {
    headers: key === undefined ? {} : { "X-API-Key": key },
  });
  return {
    status: response.status,
    headers: response.headers,
    body: await response.text(),
  };
}

/** Every file below a folder, read as bytes decoded as latin1 (nothing is lost). */
export async function readTree(path: string): Promise<string> {
  let all = "";
  for await (const entry of Deno.readDir(path)) {
    const full = `${path}/${entry.name}`;
    if (entry.isDirectory) all += await readTree(full);
    else if (entry.isFile) {
      all += new TextDecoder("latin1").decode(await Deno.readFile(full));
    }
  }
  return all;
}

/**
 * Sends raw bytes over TCP, where fetch cannot (malformed requests), and
 * returns the status of the first response, or 0 when the server answered
 * none before closing or within the time limit.
 */
export async function rawStatus(
  port: number,
  bytes: Uint8Array | string,
  options: { hostname?: string; timeoutMs?: number } = {},
): Promise<number> {
  const conn = await Deno.connect({
    hostname: options.hostname ?? "127.0.0.1",
    port,
  });
  const data = typeof bytes === "string"
    ? new TextEncoder().encode(bytes)
    : bytes;
  const timer = setTimeout(() => conn.close(), options.timeoutMs ?? 3000);
  let text = "";
  try {
    await conn.write(data).catch(() => 0);
    const buffer = new Uint8Array(16 * 1024);
    while (!/^HTTP\/1\.[01] \d{3}[^\n]*\n/.test(text)) {
      const n = await conn.read(buffer).catch(() => null);
      if (n === null) break;
      text += new TextDecoder("latin1").decode(buffer.subarray(0, n));
    }
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch {
      // closed by the timer
    }
  }
  return Number(text.match(/^HTTP\/1\.[01] (\d{3})/)?.[1] ?? 0);
}

/**
 * A throwaway CA (`ca.pem`) and a server certificate it signs for
 * localhost and 127.0.0.1 (`cert.pem`, `key.pem`) in `folder`, made with
 * openssl as an operator would have them.
 */
export async function makeTlsFiles(folder: string): Promise<void> {
  const tls = folder;
  await Deno.writeTextFile(
    `${tls}/leaf.ext`,
    "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
  );
  // A throwaway CA and a server certificate it signs, as an operator would have.
  for (
    const args of [
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test CA",
        "-keyout",
        `${tls}/ca.key`,
        "-out",
        `${tls}/ca.pem`,
      ],
      [
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        `${tls}/key.pem`,
        "-out",
        `${tls}/leaf.csr`,
      ],
      [
        "x509",
        "-req",
        "-in",
        `${tls}/leaf.csr`,
        "-CA",
        `${tls}/ca.pem`,
        "-CAkey",
        `${tls}/ca.key`,
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        `${tls}/leaf.ext`,
        "-out",
        `${tls}/cert.pem`,
      ],
    ]
  ) {
    const openssl = await new Deno.Command("openssl", {
      args,
      stdout: "null",
      stderr: "piped",
    }).output();
    assert.equal(openssl.code, 0, new TextDecoder().decode(openssl.stderr));
  }
}
