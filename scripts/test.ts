/**
 * `deno task test`: every test, the PostgreSQL ones included whenever
 * PostgreSQL is installed on the machine. With `TEST_DATABASE_URL` unset it
 * starts a throwaway cluster (scripts/postgres_test_server.sh, loopback
 * only), runs `deno test` against it and stops it, whatever the outcome.
 * Without PostgreSQL it says which tests are skipped and why, and runs the
 * rest. Arguments are passed on to `deno test` (`deno task test --filter x`).
 *
 * @module
 */

const SERVER_SCRIPT = new URL("./postgres_test_server.sh", import.meta.url)
  .pathname;
const TEST_ARGS = [
  "test",
  "--allow-all",
  "--parallel",
  "--v8-flags=--expose-gc",
];

/** The default of `deno test` here: the tests folder, unless paths are given. */
export function testArgs(args: string[]): string[] {
  const paths = args.filter((arg) => !arg.startsWith("-"));
  return [...TEST_ARGS, ...args, ...(paths.length === 0 ? ["tests/"] : [])];
}

/** True when this machine has PostgreSQL's server tools (Debian's or on PATH). */
async function postgresInstalled(): Promise<boolean> {
  const probe = await new Deno.Command("sh", {
    args: [
      "-c",
      "command -v initdb || ls /usr/lib/postgresql/*/bin/initdb",
    ],
    stdout: "null",
    stderr: "null",
  }).output();
  return probe.success;
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

async function bash(args: string[]): Promise<Deno.CommandOutput> {
  return await new Deno.Command("bash", {
    args: [SERVER_SCRIPT, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
}

async function main(args: string[]): Promise<number> {
  const env: Record<string, string> = {};
  let folder: string | undefined;
  if (Deno.env.get("TEST_DATABASE_URL")) {
    console.error("PostgreSQL tests: against TEST_DATABASE_URL");
  } else if (!(await postgresInstalled())) {
    console.error(
      "PostgreSQL tests: skipped (they show as ignored), as PostgreSQL is not installed; install it (apt-get install postgresql) or set TEST_DATABASE_URL to a database they may drop and create in",
    );
  } else {
    folder = await Deno.makeTempDir({ prefix: "keys_test_pg_" });
    // The postgres user must be able to enter it when the tests run as root.
    await Deno.chmod(folder, 0o755);
    const started = await bash(["start", `${folder}/pg`, String(freePort())]);
    if (!started.success) {
      console.error(
        `PostgreSQL tests: a throwaway server could not start, so they are skipped:\n${
          new TextDecoder().decode(started.stderr).trim()
        }`,
      );
      await Deno.remove(folder, { recursive: true });
      folder = undefined;
    } else {
      env.TEST_DATABASE_URL = new TextDecoder().decode(started.stdout).trim();
      console.error(
        `PostgreSQL tests: against a throwaway server on ${
          new URL(env.TEST_DATABASE_URL).host
        }`,
      );
    }
  }
  const child = new Deno.Command(Deno.execPath(), {
    args: testArgs(args),
    env,
    stdin: "inherit",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
  // Ctrl-C reaches the tests too; the server is stopped below either way.
  const forward = () => {
    try {
      child.kill("SIGINT");
    } catch {
      // already gone
    }
  };
  Deno.addSignalListener("SIGINT", forward);
  const status = await child.status;
  Deno.removeSignalListener("SIGINT", forward);
  if (folder !== undefined) {
    await bash(["stop", `${folder}/pg`]);
    await Deno.remove(folder, { recursive: true }).catch(() => {});
  }
  return status.code;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
