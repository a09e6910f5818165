/**
 * The project's deno.json tasks run as child processes, exactly as an
 * operator runs them (with the permissions the tasks declare), in a
 * throwaway working folder. Shared by the tests (tests/support/) and the
 * benchmark and soak (bench/), which must not import from tests/.
 *
 * @module
 */

import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);
const DENO_JSON = JSON.parse(
  await Deno.readTextFile(new URL("deno.json", ROOT)),
) as { tasks: Record<string, string> };

/**
 * The arguments of a deno.json task after `deno`, with its entrypoint made
 * absolute, as Deno's task runner would run it in `cwd` with `env`: a
 * `$(deno …)` in it (the start task derives its permissions so) is run
 * first and its output split into words, as the task runner does.
 */
export function taskArgs(
  task: string,
  options: { cwd?: string; env?: Record<string, string> } = {},
): string[] {
  const command = DENO_JSON.tasks[task];
  assert(command, `deno.json has no task ${task}`);
  const [deno, ...args] = words(command, options);
  assert.equal(deno, "deno", `task ${task} must run deno directly`);
  return args.map((arg) =>
    /^[\w/]+\.ts$/.test(arg) ? new URL(arg, ROOT).pathname : arg
  );
}

/** The words of a task's command line: quotes, and `$(…)` run and split. */
function words(
  line: string,
  options: { cwd?: string; env?: Record<string, string> },
): string[] {
  const out: string[] = [];
  let word: string | null = null;
  for (let i = 0; i < line.length;) {
    const c = line[i];
    if (/\s/.test(c)) {
      if (word !== null) out.push(word);
      word = null;
      i++;
    } else if (c === '"' || c === "'") {
      const end = line.indexOf(c, i + 1);
      assert(end > i, `unclosed quote in ${line}`);
      word = (word ?? "") + line.slice(i + 1, end);
      i = end + 1;
    } else if (line.startsWith("$(", i)) {
      let depth = 1;
      let end = i + 2;
      for (; depth > 0; end++) {
        assert(end < line.length, `unclosed $( in ${line}`);
        if (line[end] === "(") depth++;
        if (line[end] === ")") depth--;
      }
      const [deno, ...inner] = words(line.slice(i + 2, end - 1), options);
      assert.equal(deno, "deno", "a task may only substitute deno's output");
      const output = new Deno.Command(Deno.execPath(), {
        args: inner.map((arg) =>
          /^[\w/]+\.ts$/.test(arg) ? new URL(arg, ROOT).pathname : arg
        ),
        cwd: options.cwd,
        env: options.env,
        stdout: "piped",
        stderr: "inherit",
      }).outputSync();
      const text = new TextDecoder().decode(output.stdout).trim();
      const split = text === "" ? [] : text.split(/\s+/);
      if (split.length > 0) {
        word = (word ?? "") + split[0];
        for (const next of split.slice(1)) {
          out.push(word);
          word = next;
        }
      }
      i = end;
    } else {
      word = (word ?? "") + c;
      i++;
    }
  }
  if (word !== null) out.push(word);
  return out;
}

/** A fresh working folder, removed when the `using` scope ends. */
export function tempDir(): { path: string } & Disposable {
  const path = Deno.makeTempDirSync({ prefix: "isk_test_" });
  return {
    path,
    [Symbol.dispose]() {
      Deno.removeSync(path, { recursive: true });
    },
  };
}

/** Where and how a task runs. */
export interface TaskOptions {
  /** Its working folder. */
  cwd: string;
  /** Appended to the task's own arguments. */
  args?: string[];
  /** Added to the environment it inherits. */
  env?: Record<string, string>;
  /** Default "null": no input. */
  stdin?: "piped" | "null";
  /** Default "piped". */
  stdout?: "piped" | "null" | "inherit";
  /** Default "piped". */
  stderr?: "piped" | "null" | "inherit";
}

/** The command that runs a deno.json task, ready to spawn. */
export function taskCommand(task: string, options: TaskOptions): Deno.Command {
  const { cwd, args = [], env = {} } = options;
  return new Deno.Command(Deno.execPath(), {
    args: [...taskArgs(task, { cwd, env }), ...args],
    cwd,
    env,
    stdin: options.stdin ?? "null",
    stdout: options.stdout ?? "piped",
    stderr: options.stderr ?? "piped",
  });
}

/** What a finished task printed. */
export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a deno.json task to completion in `cwd`. */
export async function runTask(
  task: string,
  options: Pick<TaskOptions, "cwd" | "args" | "env">,
): Promise<RunResult> {
  const out = await taskCommand(task, options).output();
  const decoder = new TextDecoder();
  return {
    code: out.code,
    stdout: decoder.decode(out.stdout),
    stderr: decoder.decode(out.stderr),
  };
}

/** Runs `deno task keys ARGS` in `cwd`. */
export function keys(
  cwd: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<RunResult> {
  return runTask("keys", { cwd, args, env });
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

/** A server started from the `start` task, listening on a free port. */
export interface ServerProcess extends AsyncDisposable {
  /** `http://127.0.0.1:PORT`, or `unix:PATH` for a server on SOCKET_PATH (port 0) */
  url: string;
  port: number;
  process: Deno.ChildProcess;
  /**
   * Everything printed so far on stdout and stderr; with `keepOutput`
   * false, what was printed up to the listening line and then only the
   * last {@linkcode TAIL_CHARS} characters (where its last log line is).
   */
  output(): string;
  /**
   * Resolves with the first match of `pattern` in the output, as soon as it
   * is printed: a test waits for the line that says something happened
   * rather than sleeping. Rejects if the server exits first.
   */
  waitForOutput(pattern: RegExp): Promise<RegExpMatchArray>;
  /** Sends a signal and waits for the exit code. */
  stop(signal?: Deno.Signal): Promise<number>;
}

/** A server that exited, or hung, instead of listening. */
export class ServerStartError extends Error {
  override name = "ServerStartError";
  /** Its exit code; null when it hung and was killed. */
  readonly exitCode: number | null;
  /** What it printed on stdout and stderr. */
  readonly output: string;

  constructor(exitCode: number | null, output: string) {
    super(`the server did not start (exit code ${exitCode}):\n${output}`);
    this.exitCode = exitCode;
    this.output = output;
  }
}

/** How much of its latest output a server started without `keepOutput` keeps. */
export const TAIL_CHARS = 65_536;

/**
 * Starts the server with the `start` task's permissions in `cwd`.
 * `openFiles` runs it under `ulimit -n` of that many descriptors;
 * `runtimeFlags` go to `deno run` before the task's own (for example
 * `--inspect=127.0.0.1:PORT`, which the soak uses to measure the heap).
 */
export async function startServer(
  cwd: string,
  env: Record<string, string> = {},
  task = "start",
  options: {
    keepOutput?: boolean;
    openFiles?: number;
    runtimeFlags?: string[];
  } = {},
): Promise<ServerProcess> {
  // A benchmark drains millions of log lines: keep only what finds the port.
  const keep = options.keepOutput ?? true;
  const limited = options.openFiles !== undefined;
  const [run, ...rest] = taskArgs(task, { cwd, env: { PORT: "0", ...env } });
  const args = [run, ...(options.runtimeFlags ?? []), ...rest];
  const child = new Deno.Command(limited ? "bash" : Deno.execPath(), {
    args: limited
      ? [
        "-c",
        `ulimit -n ${options.openFiles} && exec "$0" "$@"`,
        Deno.execPath(),
        ...args,
      ]
      : args,
    cwd,
    env: { PORT: "0", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let text = "";
  let tail = "";
  let port = 0;
  /** Called after every chunk of output, and once the output has ended. */
  const listeners = new Set<() => void>();
  let socket: string | null = null;
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      if (keep || (port === 0 && socket === null)) text += chunk;
      else tail = (tail + chunk).slice(-TAIL_CHARS);
      for (const listener of listeners) listener();
    }
  };
  let ended = false;
  const done = Promise.all([collect(child.stdout), collect(child.stderr)])
    .finally(() => {
      ended = true;
      for (const listener of listeners) listener();
    });
  const waitForOutput = (pattern: RegExp) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const look = () => {
        const match = (text + tail).match(pattern);
        if (match || ended) listeners.delete(look);
        if (match) resolve(match);
        else if (ended) {
          reject(new Error(`the server exited without printing ${pattern}`));
        }
      };
      listeners.add(look);
      look();
    });
  // The listening line, or the exit that says why there is none. A start
  // has no step that waits long (the store's connection gives up after 3 s),
  // so the bound only ends a start that hangs, whatever the machine's speed.
  let timer: ReturnType<typeof setTimeout> | undefined;
  const listening = await Promise.race([
    waitForOutput(
      /"msg":"listening","address":"(?:https?:\/\/[^"]*:(\d+)|unix:([^"]+))"/,
    )
      .catch(() => null),
    new Promise<null>((resolve) => timer = setTimeout(resolve, 120_000, null)),
  ]).finally(() => clearTimeout(timer));
  if (listening === null) {
    const hung = !ended;
    try {
      child.kill();
    } catch {
      // already gone
    }
    const [{ code }] = await Promise.all([child.status, done]);
    throw new ServerStartError(hung ? null : code, text);
  }
  if (listening[2] !== undefined) socket = listening[2];
  else port = Number(listening[1]);
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
    url: socket === null ? `http://127.0.0.1:${port}` : `unix:${socket}`,
    port,
    process: child,
    output: () => text + tail,
    waitForOutput,
    stop,
    async [Symbol.asyncDispose]() {
      await stop();
    },
  };
}
