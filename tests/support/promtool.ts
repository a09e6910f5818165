/**
 * Prometheus's own checker, `promtool` (Debian's `prometheus` package, which
 * .ci/run installs), for the metrics tests: whether it is here, and a run of
 * it with text on its input. Without it a test says so and is skipped, and
 * under CI it fails instead (as with the npm tools, tests/support/npm_tools.ts).
 *
 * @module
 */

import { IN_CI } from "./npm_tools.ts";

/** True when `promtool` is on PATH. */
export async function promtoolInstalled(): Promise<boolean> {
  const probe = await new Deno.Command("sh", {
    args: ["-c", "command -v promtool"],
    stdout: "null",
  }).output();
  return probe.code === 0;
}

/**
 * Whether a test of `file` that needs promtool is to be ignored: not under
 * CI, where it must run (and fail without it); said once on stderr.
 */
export async function ignoreWithoutPromtool(file: string): Promise<boolean> {
  if (await promtoolInstalled()) return false;
  console.error(
    `${file}: promtool is not installed (apt-get install -y prometheus; .ci/run installs it): ${
      IN_CI ? "failing, as CI is set" : "its check is skipped"
    }`,
  );
  return !IN_CI;
}

/** `promtool ARGS` with `input` on stdin: its exit code and all it printed. */
export async function runPromtool(
  args: string[],
  input = "",
): Promise<{ code: number; output: string }> {
  const child = new Deno.Command("promtool", {
    args,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(input));
  await writer.close();
  const { code, stdout, stderr } = await child.output();
  const decoder = new TextDecoder();
  return { code, output: decoder.decode(stdout) + decoder.decode(stderr) };
}
