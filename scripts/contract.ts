/**
 * `deno task contract`: writes `openapi.json` from the route table
 * (lib/routes/table.ts) and the router's own answers (lib/http/contract.ts).
 * Run it after changing a route or its contract, and commit the result:
 * tests/contract/route_contract_test.ts fails while the committed file differs.
 * `--check` writes nothing and exits 1 when the file is out of date.
 *
 * @module
 */

import { openApiDocument } from "../lib/http/contract.ts";
import { documentedRoutes } from "../lib/routes/table.ts";

/** Where the document is written, from the repository's root. */
export const OPENAPI_FILE: URL = new URL("../openapi.json", import.meta.url);

/** The text of `openapi.json` as the route table describes it, formatted as `deno fmt` keeps it. */
export function contractText(): string {
  return JSON.stringify(openApiDocument(documentedRoutes()), null, 2) + "\n";
}

if (import.meta.main) {
  const text = contractText();
  const current = await Deno.readTextFile(OPENAPI_FILE).catch(() => null);
  if (Deno.args.includes("--check")) {
    if (current !== text) {
      console.error(
        "openapi.json differs from the route table: run deno task contract",
      );
      Deno.exit(1);
    }
  } else if (current !== text) {
    await Deno.writeTextFile(OPENAPI_FILE, text);
    console.error("openapi.json written from the route table");
  } else {
    console.error("openapi.json is up to date");
  }
}
