/**
 * The console's help texts, as the command table makes them: what they
 * promise a newcomer who copies from them.
 */

import assert from "node:assert/strict";
import { commandHelp } from "../../lib/console/_help.ts";
import { COMMANDS } from "../../lib/console/commands.ts";

Deno.test("keys update --help shows that one of --allow-from and --rate is required, not both optional", () => {
  const help = commandHelp(COMMANDS.update);
  const usage = /^Usage: deno task -q keys (.*)$/m.exec(help)?.[1];
  assert.equal(
    usage,
    "update KEY (--allow-from RANGES|any | --rate RATE|none)... [--yes] [--json]",
  );
});

Deno.test("every example in the console's help that writes an export to a file makes it private with umask 077", () => {
  let examples = 0;
  for (const [name, command] of Object.entries(COMMANDS)) {
    for (const line of commandHelp(command).split("\n")) {
      if (!/keys export/.test(line) || !/>/.test(line)) continue;
      examples++;
      assert.match(line, /umask 077;/, `keys ${name} --help: ${line}`);
    }
  }
  assert.ok(examples > 0, "the export's examples were found");
});
