/**
 * The code's layout rules that a reviewer would otherwise have to remember:
 * what ships (lib/) and the benchmark (bench/) never reach into the tests,
 * and `deno test tests/` runs exactly the test files.
 */

import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);
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

Deno.test("tests are the files named *_test.ts, and shared fixtures live in tests/support/ and are none", () => {
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
        /^[a-z0-9_]+_test\.ts$/,
        `tests/${relative}: a fixture belongs in tests/support/`,
      );
    }
  }
});
