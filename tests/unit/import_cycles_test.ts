/**
 * No module of the project imports itself back, directly or through others:
 * every entrypoint's local module graph, as `deno info` resolves it (static,
 * dynamic and type-only imports alike), is free of cycles.
 */

import assert from "node:assert/strict";
import { localGraph } from "../support/module_graph.ts";

const ENTRYPOINTS = ["main.ts", "admin.ts", "check.ts", "bench/bench.ts"];

/** Every cycle found by a depth-first walk, each as the path that closes it ("a → b → a"). */
function findCycles(graph: Map<string, string[]>): string[] {
  const cycles: string[] = [];
  const done = new Set<string>();
  const path: string[] = [];
  const onPath = new Set<string>();
  const visit = (module: string) => {
    path.push(module);
    onPath.add(module);
    for (const target of graph.get(module) ?? []) {
      if (onPath.has(target)) {
        cycles.push([...path.slice(path.indexOf(target)), target].join(" → "));
      } else if (!done.has(target)) {
        visit(target);
      }
    }
    path.pop();
    onPath.delete(module);
    done.add(module);
  };
  for (const module of [...graph.keys()].sort()) {
    if (!done.has(module)) visit(module);
  }
  return cycles;
}

Deno.test("the cycle finder names each cycle by its path and passes a graph without one", () => {
  assert.deepEqual(
    findCycles(
      new Map([
        ["lib/store.ts", ["lib/kv_store.ts"]],
        ["lib/kv_store.ts", ["lib/_import_check.ts"]],
        ["lib/_import_check.ts", ["lib/store.ts"]],
      ]),
    ),
    ["lib/_import_check.ts → lib/store.ts → lib/kv_store.ts → lib/_import_check.ts"],
  );
  assert.deepEqual(findCycles(new Map([["a.ts", ["a.ts"]]])), ["a.ts → a.ts"]);
  assert.deepEqual(
    findCycles(
      new Map([
        ["a.ts", ["b.ts", "c.ts"]],
        ["b.ts", ["c.ts"]],
        ["c.ts", []],
      ]),
    ),
    [],
  );
});

Deno.test("dynamic imports count as edges: the opener loads each store on demand", async () => {
  const graph = await localGraph("main.ts");
  assert.ok(graph.get("lib/store/open.ts")?.includes("lib/store/kv.ts"));
  assert.ok(
    graph.get("lib/store/open.ts")?.includes("lib/store/postgres/store.ts"),
  );
});

for (const entrypoint of ENTRYPOINTS) {
  Deno.test(`${entrypoint} and everything it imports form no import cycle`, async () => {
    const graph = await localGraph(entrypoint);
    assert.ok(graph.has(entrypoint), `deno info did not list ${entrypoint}`);
    const cycles = findCycles(graph);
    assert.deepEqual(
      cycles,
      [],
      `import cycles from ${entrypoint}:\n${cycles.join("\n")}`,
    );
  });
}
