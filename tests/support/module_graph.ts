/**
 * The project's own module graph as `deno info` resolves it: static,
 * dynamic and type-only imports alike, with paths relative to the project.
 *
 * @module
 */

import assert from "node:assert/strict";

const ROOT = new URL("../../", import.meta.url);

interface InfoDependency {
  code?: { specifier: string };
  type?: { specifier: string };
}

interface InfoModule {
  specifier: string;
  dependencies?: InfoDependency[];
}

/** The project's own modules reachable from `entrypoint`, each with the project modules it imports. */
export async function localGraph(
  entrypoint: string,
): Promise<Map<string, string[]>> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", entrypoint],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const info = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    modules: InfoModule[];
  };
  const local = (specifier: string) => specifier.startsWith(ROOT.href);
  const relative = (specifier: string) => specifier.slice(ROOT.href.length);
  const graph = new Map<string, string[]>();
  for (const module of info.modules) {
    if (!local(module.specifier)) continue;
    const targets = (module.dependencies ?? [])
      .flatMap((dependency) => [dependency.code, dependency.type])
      .map((resolved) => resolved?.specifier)
      .filter((specifier): specifier is string =>
        specifier !== undefined && local(specifier)
      )
      .map(relative);
    graph.set(relative(module.specifier), [...new Set(targets)]);
  }
  return graph;
}
