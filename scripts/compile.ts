/**
 * `deno task compile`: the single binary, with the permissions the
 * configuration in the environment needs (the same derivation as
 * `deno task start`, from lib/server/permissions.ts) and the start task's V8 flags,
 * read from deno.json so they are written once. A binary cannot derive its
 * permissions when it starts, so it is compiled for one configuration and
 * refuses another with the command that compiles it again.
 *
 * `--env-file` is left out of the compile on purpose: `deno compile` would
 * embed the building machine's .env, secrets included; the binary reads its
 * settings from the environment it starts in.
 *
 * @module
 */

import {
  ConfigError,
  type EnvReader,
  processEnv,
  readConfig,
} from "../lib/server/config.ts";
import {
  type Grant,
  permissionFlags,
  serverGrants,
} from "../lib/server/permissions.ts";

/** The start task's V8 flags, from deno.json. */
export function v8Flags(denoJson: { tasks: Record<string, string> }): string[] {
  return denoJson.tasks.start.trim().split(/\s+/).filter((word) =>
    word.startsWith("--v8-flags=")
  );
}

/** The whole `deno compile` command line, after `deno`, for the configuration `env` describes. */
export function compileArgs(
  denoJson: { tasks: Record<string, string> },
  env: EnvReader,
  options: { output?: string } = {},
): string[] {
  return [
    "compile",
    "--unstable-kv",
    // REUSE_PORT: Deno.listen's reusePort is unstable in Deno 2.9.
    "--unstable-net",
    "--no-prompt",
    ...v8Flags(denoJson),
    ...permissionFlags(serverGrants(readConfig(env))),
    "--output",
    options.output ?? "dist/integration-service",
    "main.ts",
  ];
}

/** One line per grant, for the operator to see what the binary may do. */
function describeGrants(grants: Grant[]): string {
  return grants.filter((grant) => grant.kind !== "env").map((grant) =>
    `  ${grant.kind} ${grant.value} (${grant.by})`
  ).join("\n");
}

async function main(): Promise<number> {
  const denoJson = JSON.parse(await Deno.readTextFile("deno.json"));
  let args: string[];
  try {
    args = compileArgs(denoJson, processEnv);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    console.error(error.message);
    return 1;
  }
  const output = await new Deno.Command(Deno.execPath(), {
    args,
    stdout: "inherit",
    stderr: "piped",
  }).output();
  if (output.success) {
    console.error(
      `Built dist/integration-service for this configuration; it may:\n${
        describeGrants(serverGrants(readConfig(processEnv)))
      }\nand nothing else. Compile again after changing any of those settings.`,
    );
    return 0;
  }
  const stderr = new TextDecoder().decode(output.stderr);
  if (runtimeNotDownloaded(stderr)) {
    console.error(
      "deno compile could not download the Deno runtime it embeds in the binary (this machine cannot reach Deno's download host); build on a machine that can, or run the service with deno task start or the Docker image",
    );
  } else {
    await Deno.stderr.write(output.stderr);
  }
  return output.code || 1;
}

/**
 * `deno compile` says so only in words: no exit code or structured error
 * tells a failed runtime download from any other failure.
 */
function runtimeNotDownloaded(stderr: string): boolean {
  return /Download.*denort|dl\.deno\.land/.test(stderr) &&
    /error/i.test(stderr);
}

if (import.meta.main) Deno.exit(await main());
