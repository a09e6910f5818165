/**
 * One release number, written once in deno.json: every entrypoint's
 * `--version` reports it, and the changelog's latest release is it. The
 * HTTP contract's version is its own (lib/http/contract_base.json).
 */

import assert from "node:assert/strict";
import { main as checkMain } from "../../check.ts";
import { parse } from "../../lib/console/_parse.ts";
import { COMMANDS } from "../../lib/console/commands.ts";
import base from "../../lib/http/contract_base.json" with { type: "json" };
import { readStartArguments } from "../../lib/server/arguments.ts";
import { VERSION, versionLine } from "../../lib/util/version.ts";

const ROOT = new URL("../../", import.meta.url);
const SEMVER = /^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/;
const release: string = JSON.parse(
  Deno.readTextFileSync(new URL("deno.json", ROOT)),
).version;

Deno.test("the version every entrypoint reports is deno.json's, a semantic version", () => {
  assert.match(release, SEMVER);
  assert.equal(VERSION, release);
  assert.equal(versionLine(), `integration-service ${release}`);
});

Deno.test("start, keys and check each answer --version with the same line", async () => {
  assert.equal(readStartArguments(["--version"]), "version");
  assert.deepEqual(parse(["--version"], COMMANDS), { help: versionLine() });
  let printed = "";
  const code = await checkMain(["--version"], {
    env: () => undefined,
    write: (text) => printed += text,
  });
  assert.deepEqual([code, printed], [0, versionLine()]);
});

Deno.test("the changelog's latest release is the version deno.json carries, below an Unreleased section", () => {
  const text = Deno.readTextFileSync(new URL("CHANGELOG.md", ROOT));
  const headings = [...text.matchAll(/^## \[([^\]]+)\](?: - (\S+))?$/gm)];
  assert.equal(headings[0]?.[1], "Unreleased");
  assert.equal(headings[1]?.[1], release);
  assert.match(headings[1]?.[2] ?? "", /^\d{4}-\d{2}-\d{2}$/);
});

Deno.test("openapi.json's info.version is the HTTP contract's own, a semantic version kept in contract_base.json", () => {
  assert.match(base.info.version, SEMVER);
  const document = JSON.parse(
    Deno.readTextFileSync(new URL("openapi.json", ROOT)),
  );
  assert.equal(document.info.version, base.info.version);
});
