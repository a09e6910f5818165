/**
 * `deno task compile`: the single binary, with exactly the permissions and
 * V8 flags of `deno task start`, read from deno.json so they are written
 * once. `--env-file` is left out on purpose: `deno compile` would embed the
 * building machine's .env, secrets included; the binary reads its settings
 * from the environment it starts in.
 *
 * @module
 */

/** Flags of the start task the binary must carry. */
const CARRIED = /^(--allow-|--deny-|--v8-flags=)/;

/** The start task's permission and V8 flags, from deno.json. */
export function startFlags(
  denoJson: { tasks: Record<string, string> },
): string[] {
  return denoJson.tasks.start.trim().split(/\s+/).filter((word) =>
    CARRIED.test(word)
  );
}

/** The whole `deno compile` command line, after `deno`. */
export function compileArgs(
  denoJson: { tasks: Record<string, string> },
  options: { output?: string } = {},
): string[] {
  return [
    "compile",
    "--unstable-kv",
    ...startFlags(denoJson),
    "--output",
    options.output ?? "dist/integration-service",
    "main.ts",
  ];
}

async function main(): Promise<number> {
  const denoJson = JSON.parse(await Deno.readTextFile("deno.json"));
  const output = await new Deno.Command(Deno.execPath(), {
    args: compileArgs(denoJson),
    stdout: "inherit",
    stderr: "piped",
  }).output();
  if (output.success) return 0;
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
