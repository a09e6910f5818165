/**
 * The documents against the code, where they drift most easily: the
 * operators' table of environment variables against what `lib/server/config.ts`
 * reads and what the tasks may read, `docs/console.md` against the console's
 * command table, integrators.md's list of routes against the route table,
 * and every relative link in README.md and docs/ against the
 * files and headings it points to.
 */

import assert from "node:assert/strict";
import {
  type EnvReader,
  readConfig,
  readStoreLocation,
} from "../../lib/server/config.ts";
import { COMMANDS } from "../../lib/console/commands.ts";
import { commandHelp, mainHelp } from "../../lib/console/_help.ts";
import { parse } from "../../lib/console/_parse.ts";
import { consoleGrants, serverGrants } from "../../lib/server/permissions.ts";
import { ROUTES } from "../support/route_table.ts";

const ROOT = new URL("../../", import.meta.url);

function read(path: string): string {
  return Deno.readTextFileSync(new URL(path, ROOT));
}

/** Markdown without its fenced code blocks, whose `#` lines are no headings. */
function prose(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "");
}

/** The lines of the first table after the heading `## title`. */
function tableAfter(markdown: string, heading: string): string[][] {
  const start = prose(markdown).split("\n").findIndex((line) =>
    line.trim() === heading
  );
  assert.notEqual(start, -1, `no heading "${heading}"`);
  const lines = prose(markdown).split("\n").slice(start + 1);
  const first = lines.findIndex((line) => line.startsWith("|"));
  assert.notEqual(first, -1, `no table after "${heading}"`);
  const rows: string[][] = [];
  for (const line of lines.slice(first)) {
    if (!line.startsWith("|")) break;
    rows.push(line.slice(1, -1).split("|").map((cell) => cell.trim()));
  }
  // Header and separator rows.
  return rows.slice(2);
}

// --- (1) Environment variables -------------------------------------------

/** The variables lib/server/config.ts reads: named in its source, or asked for when it runs. */
function configVariables(): Set<string> {
  const source = read("lib/server/config.ts");
  const named = new Set(
    [...source.matchAll(/\(\s*env,\s*"([A-Z][A-Z0-9_]*)"/g)].map((m) => m[1]),
  );
  // What readConfig actually asks for, with nothing set and with PostgreSQL
  // chosen: a name read some other way than `reader(env, "NAME"` shows up
  // here and not above, and the test says so rather than missing it.
  const asked = new Set<string>();
  const recording = (values: Record<string, string>): EnvReader => (name) => {
    asked.add(name);
    return values[name];
  };
  readConfig(recording({}));
  readStoreLocation(recording({ DATABASE_URL: "postgres://u@localhost/db" }));
  // Both ways count: names in the source catch one read only on some path,
  // names asked for catch one the source builds (a table, a loop).
  const all = new Set([...named, ...asked]);
  assert.ok(all.size >= 10, `found only ${[...all]} in lib/server/config.ts`);
  return all;
}

/** Variables the server's and the console's permissions let them read. */
function grantedVariables(): Set<string> {
  const json = JSON.parse(read("deno.json"));
  const granted = new Set<string>();
  const add = (list: string) =>
    list.split(",").filter((n) => n !== "").forEach((n) => granted.add(n));
  for (const task of ["start", "keys", "compile"]) {
    const command = json.tasks?.[task];
    const text = typeof command === "string" ? command : command?.command;
    for (const m of String(text ?? "").matchAll(/--allow-env=(\S+)/g)) {
      add(m[1]);
    }
  }
  // What lib/server/permissions.ts grants, for configurations that use every kind of store.
  const configurations: Record<string, string>[] = [
    {},
    { DENO_KV_PATH: "https://kv.example.com/db" },
    { DATABASE_URL: "postgres://u@localhost/db" },
  ];
  for (const env of configurations) {
    const reader = (name: string) => env[name];
    for (
      const grant of [
        ...serverGrants(readConfig(reader)),
        ...consoleGrants(readStoreLocation(reader)),
      ]
    ) {
      if (grant.kind === "env") granted.add(grant.value);
    }
  }
  // Deno's permission sets, should the tasks use them.
  for (const set of Object.values(json.permissions ?? {})) {
    const env = (set as { env?: unknown }).env;
    if (Array.isArray(env)) env.forEach((n) => granted.add(String(n)));
  }
  // The check's variables are the integrator's, documented in integrators.md.
  return granted;
}

/** Variable names read literally anywhere in lib/ but the integrator's check. */
function libVariables(): Set<string> {
  const names = new Set<string>();
  const walk = (dir: URL) => {
    for (const entry of Deno.readDirSync(dir)) {
      if (entry.isDirectory && entry.name !== "check") {
        walk(new URL(`${entry.name}/`, dir));
      } else if (entry.name.endsWith(".ts")) {
        const source = Deno.readTextFileSync(new URL(entry.name, dir));
        for (
          const m of source.matchAll(
            /\b(?:processEnv|env|Deno\.env\.get)\(\s*"([A-Z][A-Z0-9_]*)"/g,
          )
        ) names.add(m[1]);
      }
    }
  };
  walk(new URL("lib/", ROOT));
  return names;
}

/** Each variable named in the operators' table, once per mention. */
function tableVariables(): { names: string[]; otelRows: number } {
  const rows = tableAfter(read("docs/operators.md"), "## Configuration");
  const names: string[] = [];
  let otelRows = 0;
  for (const [first] of rows) {
    if (first.includes("OTEL_")) {
      // Read by Deno itself, not by the service's code.
      otelRows++;
      continue;
    }
    const found = [...first.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]);
    assert.ok(
      found.length > 0,
      `a row of the table names no variable: ${first}`,
    );
    names.push(...found);
  }
  return { names, otelRows };
}

Deno.test("every variable lib/server/config.ts reads is in the operators' table exactly once", () => {
  const { names } = tableVariables();
  for (const name of configVariables()) {
    const count = names.filter((n) => n === name).length;
    assert.equal(
      count,
      1,
      `${name} is read by lib/server/config.ts and appears ${count} times in the table of docs/operators.md#configuration`,
    );
  }
});

Deno.test("every variable the server and console may read is in the operators' table exactly once", () => {
  const { names } = tableVariables();
  for (const name of grantedVariables()) {
    const count = names.filter((n) => n === name).length;
    assert.equal(
      count,
      1,
      `${name} is granted by a task's --allow-env and appears ${count} times in the table of docs/operators.md#configuration`,
    );
  }
});

Deno.test("the operators' table lists no variable the code does not read", () => {
  const { names, otelRows } = tableVariables();
  assert.equal(otelRows, 1, "one row for OTEL_DENO and the standard OTEL_*");
  const known = new Set([
    ...configVariables(),
    ...grantedVariables(),
    ...libVariables(),
  ]);
  for (const name of names) {
    assert.ok(
      known.has(name),
      `docs/operators.md lists ${name}, which neither lib/ reads nor a task may read`,
    );
  }
});

// --- (2) Console commands ------------------------------------------------

/** `### \`keys NAME\`` sections of docs/console.md, with their text. */
function commandSections(): Map<string, string> {
  const text = prose(read("docs/console.md"));
  const sections = new Map<string, string>();
  const parts = text.split(/^(?=#{1,6} )/m);
  for (const part of parts) {
    const m = part.match(/^#{2,6} `keys ([a-z-]+)`\s*\n/);
    if (m) sections.set(m[1], part);
  }
  return sections;
}

Deno.test("every command of keys --help has its section in docs/console.md, with its options", () => {
  const sections = commandSections();
  for (const [name, command] of Object.entries(COMMANDS)) {
    const section = sections.get(name);
    assert.ok(
      section !== undefined,
      `docs/console.md has no "### \`keys ${name}\`" section`,
    );
    for (const option of Object.keys(command.options)) {
      assert.ok(
        section.includes(`--${option}`),
        `docs/console.md's section on keys ${name} does not name --${option}`,
      );
    }
  }
  for (const name of sections.keys()) {
    assert.ok(
      name in COMMANDS,
      `docs/console.md documents "keys ${name}", which the console does not have`,
    );
  }
});

Deno.test("keys --help lists the commands of the table docs/console.md follows", async () => {
  const { code, stdout } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-q", "--no-prompt", "admin.ts", "--help"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "inherit",
  }).output();
  assert.equal(code, 0);
  const help = new TextDecoder().decode(stdout);
  const commands = help.split(/^Commands:\n/m)[1]?.split("\n\n")[0] ?? "";
  const listed = [...commands.matchAll(/^ {2}([a-z-]+)\b/gm)].map((m) => m[1]);
  assert.deepEqual(listed, Object.keys(COMMANDS));
});

// --- (3) Links -----------------------------------------------------------

/** GitHub's anchor for a heading. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  for (const m of prose(markdown).matchAll(/^#{1,6} (.+)$/gm)) {
    const base = slug(m[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    result.add(n === 0 ? base : `${base}-${n}`);
  }
  return result;
}

function documents(): string[] {
  const docs = [...Deno.readDirSync(new URL("docs/", ROOT))]
    .filter((e) => e.isFile && e.name.endsWith(".md"))
    .map((e) => `docs/${e.name}`)
    .sort();
  return ["README.md", ...docs];
}

Deno.test("every relative link in README.md and docs/ points to a file and heading that exist", () => {
  let checked = 0;
  for (const doc of documents()) {
    const text = prose(read(doc)).replace(/`[^`\n]*`(?!\])/g, "``");
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1];
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
      const [path, anchor] = target.split("#", 2);
      const file = path === ""
        ? new URL(doc, ROOT)
        : new URL(path, new URL(doc, ROOT));
      let info: Deno.FileInfo;
      try {
        info = Deno.statSync(file);
      } catch {
        assert.fail(`${doc} links to ${target}, which does not exist`);
      }
      if (anchor !== undefined) {
        assert.ok(
          info.isFile && file.pathname.endsWith(".md"),
          `${doc}: ${target}`,
        );
        assert.ok(
          anchors(Deno.readTextFileSync(file)).has(anchor),
          `${doc} links to ${target}, which has no heading #${anchor}`,
        );
      }
      checked++;
    }
  }
  assert.ok(checked > 20, `only ${checked} links found`);
});

/** The words of each `deno task -q keys …` command written in the docs and help texts. */
function documentedConsoleCommands(): { where: string; args: string[] }[] {
  const sources: [string, string][] = [
    ["README.md", read("README.md")],
    ...[...Deno.readDirSync(new URL("docs/", ROOT))].map((
      e,
    ): [string, string] => [`docs/${e.name}`, read(`docs/${e.name}`)]),
    ["keys --help", mainHelp(COMMANDS)],
    ...Object.keys(COMMANDS).map((name): [string, string] => [
      `keys ${name} --help`,
      commandHelp(COMMANDS[name]),
    ]),
  ];
  const found: { where: string; args: string[] }[] = [];
  for (const [where, text] of sources) {
    for (const match of text.matchAll(/deno task (?:-q )?keys ([^\n`]*)/g)) {
      // Placeholders of the usage lines, not commands.
      if (/^<|\$\{/.test(match[1])) continue;
      // A usage line's optional parts ([--json]) are not arguments, and of
      // a required choice ((--allow-from RANGES | --rate RATE)...) the first
      // alternative stands for it.
      const line = match[1].replace(/\[[^\]]*\]/g, "")
        .replace(/\(([^|)]*)\|[^)]*\)(?:\.\.\.)?/g, "$1");
      const args: string[] = [];
      for (
        const word of line.matchAll(
          /"([^"]*)"|'([^']*)'|([^\s|<>)#&;\\]+)|([|<>)#&;\\])/g,
        )
      ) {
        if (word[4] !== undefined) break;
        args.push(word[1] ?? word[2] ?? word[3]);
      }
      found.push({ where, args });
    }
  }
  return found;
}

Deno.test("the README, the docs and --help run the console as deno task -q keys, so the task runner prints no argument", () => {
  const commands = documentedConsoleCommands();
  const sources = [
    read("README.md"),
    ...[...Deno.readDirSync(new URL("docs/", ROOT))].map((e) =>
      read(`docs/${e.name}`)
    ),
    mainHelp(COMMANDS),
    ...Object.values(COMMANDS).map(commandHelp),
  ];
  assert.ok(commands.length >= 15, `found only ${commands.length}`);
  for (const text of sources) {
    // Without -q, deno task prints "Task keys … ARGS" first: a key given
    // by mistake, or a reason, would be repeated on the terminal.
    const bare = text.match(/deno task keys [^\n`]*/);
    assert.equal(bare, null, `"${bare?.[0]}" lets the task runner print it`);
  }
});

Deno.test("every deno task keys command in the README, the docs and --help is one the console accepts", () => {
  const commands = documentedConsoleCommands();
  assert.ok(commands.length >= 15, `found only ${commands.length}`);
  for (const { where, args } of commands) {
    try {
      parse(args, COMMANDS);
    } catch (error) {
      assert.fail(
        `${where}: "deno task keys ${args.join(" ")}" is refused: ${
          (error as Error).message
        }`,
      );
    }
  }
});

Deno.test("operators.md counts the check's variables as integrators.md lists them and the check task may read them", () => {
  const variables = tableAfter(
    read("docs/integrators.md"),
    "## Monitoring with `deno task check`",
  ).map((row) => row[0].replaceAll("`", "")).filter((name) =>
    /^[A-Z_]+$/.test(name)
  );
  const tasks = JSON.parse(read("deno.json")).tasks as Record<string, string>;
  const allowEnv = /--allow-env=(\S+)/.exec(tasks.check)?.[1].split(",");
  assert.deepEqual([...variables].sort(), [...allowEnv ?? []].sort());
  const words = ["none", "one", "two", "three", "four", "five", "six", "seven"];
  const counted = words[variables.length];
  const operators = read("docs/operators.md");
  const mentions = [
    ...operators.matchAll(/\bits\s+(?:own\s+)?\[?(\w+)/g),
  ].map((m) => m[1]).filter((word) => words.includes(word));
  assert.ok(mentions.length >= 2, `found ${mentions.join(", ")}`);
  for (const word of mentions) assert.equal(word, counted);
});

Deno.test("every npx command in the README and the docs puts -- before deno, so npx leaves Deno's flags alone", () => {
  const sources = [
    "README.md",
    ...[...Deno.readDirSync(new URL("docs/", ROOT))].map((e) =>
      `docs/${e.name}`
    ),
  ];
  let found = 0;
  for (const path of sources) {
    for (const match of read(path).matchAll(/npx [^\n`]*?deno@[\d.]+/g)) {
      found++;
      assert.match(match[0], /^npx -y -- deno@/, `${path}: ${match[0]}`);
    }
  }
  assert.ok(found >= 3, `found only ${found}`);
});

Deno.test("integrators.md's API at a glance lists exactly the route table's routes, each with its authentication", () => {
  const section = read("docs/integrators.md").split("## The API at a glance")[1]
    .split("\n## ")[0];
  const rows = [
    ...section.matchAll(/^\| `(?:GET|POST) (\/[^`]*)` +\| ([^|]+?) +\|/gm),
  ]
    .map(([, path, auth]) => [path, auth === "none" ? "none" : "api_key"]);
  const table = ROUTES.map((route) => [route.path, route.auth]);
  assert.deepEqual(
    rows.toSorted(([a], [b]) => a.localeCompare(b)),
    table.toSorted(([a], [b]) => a.localeCompare(b)),
    "add or remove the route's row in docs/integrators.md",
  );
});
