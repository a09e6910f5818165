/**
 * `deno task keys`: runs the console (admin.ts) with exactly the permissions
 * its configuration and command line need: the store DENO_KV_PATH or
 * DATABASE_URL names, and the FILE an export writes or an import reads,
 * wherever they are. Deno's task runner cannot pass a task's arguments to
 * a command that derives flags from them, hence this launcher.
 *
 * It passes stdin, stdout, stderr and the exit code through, and SIGINT,
 * SIGTERM and SIGHUP on to the console.
 *
 * @module
 */

import {
  ConfigError,
  type EnvReader,
  processEnv,
  readStoreLocation,
} from "../lib/server/config.ts";
import { parse } from "../lib/console/_parse.ts";
import { COMMANDS } from "../lib/console/commands.ts";
import {
  CONSOLE_VARIABLES,
  consoleGrants,
  ENV_FILE_GRANT,
  type Grant,
  permissionFlags,
  variableGrants,
} from "../lib/server/permissions.ts";

const ADMIN = new URL("../admin.ts", import.meta.url);

/** The `deno` arguments that run the console for `args`. */
export function consoleArgs(args: string[], env: EnvReader): string[] {
  let files: { read?: string[]; write?: string[] } = {};
  try {
    const parsed = parse(args, COMMANDS);
    if (!("help" in parsed)) {
      files = parsed.command.files?.(parsed.positionals) ?? {};
    }
  } catch {
    // A wrong command line: the console itself says what is wrong with it.
  }
  let grants: Grant[];
  try {
    grants = consoleGrants(readStoreLocation(env), files);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    // The console reads the same variables and words the problem, naming
    // what comes from .env.
    grants = [...variableGrants(CONSOLE_VARIABLES), ENV_FILE_GRANT];
  }
  return [
    "run",
    "-q",
    "--no-prompt",
    ...permissionFlags(grants),
    ADMIN.protocol === "file:"
      ? decodeURIComponent(ADMIN.pathname)
      : ADMIN.href,
    ...args,
  ];
}

async function main(): Promise<number> {
  const child = new Deno.Command(Deno.execPath(), {
    args: consoleArgs(Deno.args, processEnv),
    stdin: "inherit",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
  const signals: Deno.Signal[] = ["SIGINT", "SIGTERM", "SIGHUP"];
  const forward = signals.map((signal) => {
    const listener = () => {
      try {
        child.kill(signal);
      } catch {
        // Already gone: its exit code follows.
      }
    };
    Deno.addSignalListener(signal, listener);
    return () => Deno.removeSignalListener(signal, listener);
  });
  const status = await child.status;
  forward.forEach((remove) => remove());
  if (status.signal !== null) {
    const numbers: Record<string, number> = {
      SIGHUP: 1,
      SIGINT: 2,
      SIGKILL: 9,
      SIGTERM: 15,
    };
    return 128 + (numbers[status.signal] ?? 0);
  }
  return status.code;
}

if (import.meta.main) Deno.exit(await main());
