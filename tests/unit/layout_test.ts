/**
 * The code's layout rules that a reviewer would otherwise have to remember:
 * what ships (lib/) and the benchmark (bench/) never reach into the tests,
 * and `deno test tests/` runs exactly the test files.
 */

import assert from "node:assert/strict";

const ROOT = new URL("../../", import.meta.url);
const TESTS = new URL("tests/", ROOT).href;

/** Every TypeScript file below a folder of the project, as URLs. */
function* typescriptFiles(folder: URL): Generator<URL> {
  for (const entry of Deno.readDirSync(folder)) {
    const url = new URL(entry.name + (entry.isDirectory ? "/" : ""), folder);
    if (entry.isDirectory) yield* typescriptFiles(url);
    else if (entry.name.endsWith(".ts")) yield url;
  }
}

/** The relative specifiers a module imports or re-exports, static and dynamic. */
function relativeImports(source: string): string[] {
  const found = source.matchAll(
    /(?:\bfrom\s+|\bimport\s*\(\s*|\bimport\s+)["'](\.{1,2}\/[^"']+)["']/g,
  );
  return [...found].map((match) => match[1]);
}

// What ships (lib/) and what measures it (bench/) must run without the tests.
for (const [folder, least] of [["lib/", 10], ["bench/", 2]] as const) {
  Deno.test(`no module under ${folder} imports anything from tests/`, () => {
    let modules = 0;
    for (const file of typescriptFiles(new URL(folder, ROOT))) {
      modules++;
      for (const specifier of relativeImports(Deno.readTextFileSync(file))) {
        const target = new URL(specifier, file).href;
        assert.ok(
          !target.startsWith(TESTS),
          `${file.href.slice(ROOT.href.length)} imports ${specifier}`,
        );
      }
    }
    assert.ok(modules >= least, `${folder} was found and read`);
  });
}

Deno.test("tests are the files named *_test.ts in a folder of their kind, and shared fixtures live in tests/support/ and are none", () => {
  const support = new URL("support/", TESTS).href;
  for (const file of typescriptFiles(new URL(TESTS))) {
    const relative = file.href.slice(TESTS.length);
    if (file.href.startsWith(support)) {
      assert.ok(
        !/(^|[._])test\.ts$/.test(relative),
        `tests/${relative} would be run as a test`,
      );
    } else {
      assert.match(
        relative,
        /^(unit|contract|e2e)\/[a-z0-9_]+_test\.ts$/,
        `tests/${relative}: a test belongs in tests/unit/ (in process), tests/contract/ (against a real store, tool or document) or tests/e2e/ (the programs), a fixture in tests/support/`,
      );
    }
  }
});

/**
 * The folders of lib/, lowest first: a module imports from its own folder
 * or from a folder before its own, never from one after it, so that the
 * walk of a request reads downhill and nothing runs back up.
 */
const LAYERS = [
  "util",
  "net",
  "store",
  "auth",
  "usage",
  "webhooks",
  "http",
  "routes",
  "server",
  "console",
  "check",
];

/** The layer of a lib/ module: its first folder below lib/. */
function layerOf(relative: string): string {
  return relative.slice("lib/".length).split("/")[0];
}

Deno.test("every module under lib/ sits in a layer folder, and imports only from its own layer or lower ones", () => {
  const lib = new URL("lib/", ROOT);
  let checked = 0;
  for (const file of typescriptFiles(lib)) {
    const relative = file.href.slice(ROOT.href.length);
    const layer = layerOf(relative);
    assert.ok(
      LAYERS.includes(layer),
      `${relative} sits outside the layer folders (${LAYERS.join(", ")})`,
    );
    for (const specifier of relativeImports(Deno.readTextFileSync(file))) {
      const target = new URL(specifier, file).href.slice(ROOT.href.length);
      if (!target.startsWith("lib/")) continue;
      checked++;
      const to = layerOf(target);
      assert.ok(
        LAYERS.indexOf(to) <= LAYERS.indexOf(layer),
        `${relative} (${layer}) imports ${target} (${to}), a higher layer`,
      );
    }
  }
  assert.ok(checked > 50, "the imports were found and read");
});

Deno.test("no module under lib/ is longer than 450 lines", () => {
  for (const file of typescriptFiles(new URL("lib/", ROOT))) {
    const lines = Deno.readTextFileSync(file).split("\n").length;
    assert.ok(
      lines <= 451,
      `${file.href.slice(ROOT.href.length)} has ${lines} lines`,
    );
  }
});

/**
 * Each backend's adapter: the code that provides the seam's entries
 * (lib/store/entries.ts) on its database. The layout above the seam is
 * written once; an adapter that grew past this would be taking rules back
 * from it. PostgreSQL's pool and time limits (connection.ts) and its
 * schema (schema.ts) are counted apart, in docs/design.md.
 */
const ADAPTERS = {
  "Deno KV": ["lib/store/kv.ts"],
  PostgreSQL: [
    "lib/store/postgres/entries.ts",
    "lib/store/postgres/_key_codec.ts",
    "lib/store/postgres/store.ts",
  ],
};

Deno.test("each backend's adapter fits in 500 lines, and only the adapters touch their database", () => {
  for (const [backend, files] of Object.entries(ADAPTERS)) {
    const lines = files.reduce(
      (sum, file) =>
        sum + Deno.readTextFileSync(new URL(file, ROOT)).split("\n").length - 1,
      0,
    );
    assert.ok(lines <= 500, `${backend}'s adapter has ${lines} lines`);
  }
  // Nothing else opens Deno KV or names the PostgreSQL driver.
  for (const file of typescriptFiles(new URL("lib/", ROOT))) {
    const relative = file.href.slice(ROOT.href.length);
    const source = Deno.readTextFileSync(file);
    if (relative !== "lib/store/kv.ts") {
      assert.ok(!source.includes("Deno.openKv"), `${relative} opens Deno KV`);
      assert.ok(!/\bDeno\.Kv\b/.test(source), `${relative} uses Deno.Kv`);
    }
    if (!relative.startsWith("lib/store/postgres/")) {
      assert.ok(
        !/from "postgres"/.test(source),
        `${relative} imports the PostgreSQL driver`,
      );
    }
  }
});
