/**
 * The code's layout rules that a reviewer would otherwise have to remember:
 * what ships (lib/) never reaches into the tests.
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

Deno.test("no module under lib/ imports anything from tests/", () => {
  let modules = 0;
  for (const file of typescriptFiles(new URL("lib/", ROOT))) {
    modules++;
    for (const specifier of relativeImports(Deno.readTextFileSync(file))) {
      const target = new URL(specifier, file).href;
      assert.ok(
        !target.startsWith(TESTS),
        `${file.href.slice(ROOT.href.length)} imports ${specifier}`,
      );
    }
  }
  assert.ok(modules > 10, "lib/ was found and read");
});
