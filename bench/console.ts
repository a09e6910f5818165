/**
 * The console at scale: each command an administrator runs (`create`,
 * `show`, `update`, `revoke`, `rotate`, and `list` to its first line),
 * timed end to end through `deno task -q keys` (the launcher's and the
 * console's start-ups included) on a store of 10 keys and one of 100,000,
 * on a Deno KV file and on PostgreSQL. The two sizes of a store kind are
 * measured in turns, run by run, so that the ratio of each command at
 * 100,000 keys to the same command at 10 comes from one run and the same
 * load on the machine. The target (issue 20): every ratio at most 1.5.
 *
 * Each store is filled as an administrator would fill it: `keys import` of a
 * generated export (JSON lines), itself timed.
 *
 * Run with `deno task bench` (after the server rows) or alone with
 * `deno task bench console`. Environment: BENCH_CONSOLE_SIZES
 * ("10,100000": the first is the base of the ratios), BENCH_CONSOLE_RUNS
 * (9, at most one less than the smaller size), BENCH_DATABASE_URL (a
 * PostgreSQL server on 127.0.0.1 whose user may create databases; unset: a
 * throwaway cluster from scripts/postgres_test_server.sh when PostgreSQL is
 * installed, else PostgreSQL is left out and says so), BENCH_CONSOLE_OUTPUT
 * (unset: the table is printed only; bench/results_console.md updates the
 * committed results).
 *
 * @module
 */

import { newRecord } from "../lib/store/records.ts";
import { taskCommand, tempDir } from "../scripts/task_process.ts";
import { type BenchStore, kvKind, postgresKind } from "./stores.ts";

const SIZES = (Deno.env.get("BENCH_CONSOLE_SIZES") ?? "10,100000").split(",")
  .map(Number);
const RUNS = Number(Deno.env.get("BENCH_CONSOLE_RUNS") ?? 9);
/** Where the table is written; unset, it is only returned to be printed. */
const OUTPUT = Deno.env.get("BENCH_CONSOLE_OUTPUT") || undefined;
/** The issue's bound on a command at the larger size against the smaller. */
const TARGET_RATIO = 1.5;

/** The commands timed, in the order the table lists them. */
const COMMANDS = [
  "create",
  "show",
  "update",
  "revoke",
  "rotate",
  "list (first line)",
] as const;
type CommandName = typeof COMMANDS[number];

/** One store being measured: its size, folder and environment. */
interface Sized {
  size: number;
  cwd: string;
  env: Record<string, string>;
}

/** What one store kind measured: median ms per command and size, and the fills. */
export interface ConsoleResult {
  kind: string;
  /** Median milliseconds, by command, then by size. */
  medians: Map<CommandName, Map<number, number>>;
  /** Seconds `keys import` took to fill the store, by size. */
  imports: Map<number, number>;
}

/** An export of `size` valid keys, as `keys export` writes one. */
async function writeExport(file: string, size: number): Promise<void> {
  const at = new Date(Date.now() - 86_400_000);
  const handle = await Deno.open(file, {
    createNew: true,
    write: true,
    mode: 0o600,
  });
  const encoder = new TextEncoder();
  let chunk: string[] = [JSON.stringify({
    format: "integration-service-keys",
    version: 3,
    exportedAt: at.toISOString(),
    exportedBy: "bench",
  })];
  const flush = async () => {
    const bytes = encoder.encode(chunk.join("\n") + "\n");
    for (let written = 0; written < bytes.length;) {
      written += await handle.write(bytes.subarray(written));
    }
    chunk = [];
  };
  for (let id = 1; id <= size; id++) {
    const record = newRecord(id, {
      name: `site-${id}`,
      email: `site-${id}@example.com`,
      // Unique, well-formed hashes: the console never needs the keys.
      hash: id.toString(16).padStart(64, "0"),
      hint: "isk_…abcd",
    }, at);
    chunk.push(JSON.stringify({ type: "key", record }));
    if (chunk.length >= 5_000) await flush();
  }
  chunk.push(JSON.stringify({ type: "end", keys: size, audit: 0 }));
  await flush();
  handle.close();
}

/** Runs `deno task -q keys ARGS` to its end; milliseconds, process start included. */
async function timed(store: Sized, args: string[]): Promise<number> {
  const started = performance.now();
  const out = await taskCommand("keys", {
    cwd: store.cwd,
    args,
    env: store.env,
  }).output();
  const ms = performance.now() - started;
  if (out.code !== 0) {
    throw new Error(
      `keys ${args.join(" ")} failed at ${store.size} keys: ${
        new TextDecoder().decode(out.stderr)
      }`,
    );
  }
  return ms;
}

/** `keys list` until its first line reaches the reader, who then goes away. */
async function firstLine(store: Sized): Promise<number> {
  const started = performance.now();
  const child = taskCommand("keys", {
    cwd: store.cwd,
    args: ["list"],
    env: store.env,
    stderr: "null",
  }).spawn();
  const reader = child.stdout.getReader();
  let text = "";
  const decoder = new TextDecoder();
  let ms = NaN;
  while (true) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    // The heading, then the first key's row.
    if (text.split("\n").length > 2) {
      ms = performance.now() - started;
      break;
    }
  }
  // Like `keys list | head -2`: the console ends quietly on a closed pipe.
  await reader.cancel();
  await child.status;
  if (Number.isNaN(ms)) throw new Error(`keys list printed no key row`);
  return ms;
}

/**
 * The arguments of run `run` of `command` on a store of `size` keys: each
 * changes a key of its own, so that no run finds its work done already.
 * Keys 1..RUNS are revoked; `create` adds keys size+1..size+RUNS, which
 * `rotate` then rotates; key `size` is shown and updated.
 */
function argsOf(command: CommandName, size: number, run: number): string[] {
  switch (command) {
    case "create":
      return ["create", "--name", `bench-${run}`, "--email", "b@example.com"];
    case "show":
      return ["show", String(size)];
    case "update":
      return [
        "update",
        String(size),
        "--allow-from",
        run % 2 === 0 ? "192.0.2.0/24" : "any",
      ];
    case "revoke":
      return ["revoke", String(run + 1), "--yes"];
    case "rotate":
      return ["rotate", String(size + run + 1), "--yes"];
    case "list (first line)":
      return ["list"];
  }
}

/** Every command on stores of every size of one kind, sizes in turns. */
async function measureKind(
  kind: { name: string; create: (dir: string) => Promise<BenchStore> },
): Promise<ConsoleResult> {
  const dirs = SIZES.map(() => tempDir());
  const stores: BenchStore[] = [];
  try {
    const sized: Sized[] = [];
    const imports = new Map<number, number>();
    for (const [i, size] of SIZES.entries()) {
      const store = await kind.create(dirs[i].path);
      stores.push(store);
      const file = `${dirs[i].path}/fill.jsonl`;
      await writeExport(file, size);
      const one: Sized = { size, cwd: dirs[i].path, env: store.env };
      console.error(`${kind.name}: importing ${size} keys …`);
      imports.set(size, (await timed(one, ["import", file])) / 1000);
      // One command first, so that no size pays for a cold cache alone.
      await timed(one, ["show", "1"]);
      sized.push(one);
    }
    const medians = new Map<CommandName, Map<number, number>>();
    for (const command of COMMANDS) {
      const times = new Map<number, number[]>(SIZES.map((s) => [s, []]));
      for (let run = 0; run < RUNS; run++) {
        // Alternate which size goes first, so neither always follows the other.
        const order = run % 2 === 0 ? sized : [...sized].reverse();
        for (const store of order) {
          const ms = command === "list (first line)"
            ? await firstLine(store)
            : await timed(store, argsOf(command, store.size, run));
          times.get(store.size)!.push(ms);
        }
      }
      medians.set(
        command,
        new Map([...times].map(([size, all]) => [size, median(all)])),
      );
      console.error(
        `${kind.name}: ${command}: ${
          [...medians.get(command)!].map(([s, ms]) =>
            `${Math.round(ms)} ms at ${s}`
          ).join(", ")
        }`,
      );
    }
    return { kind: kind.name, medians, imports };
  } finally {
    for (const store of stores) await store[Symbol.asyncDispose]();
    for (const dir of dirs) dir[Symbol.dispose]();
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? sorted[middle]
    : (sorted[middle - 1] + sorted[middle]) / 2;
}

/** The results as Markdown: one table, every kind's sizes and ratios side by side. */
export function consoleTable(
  results: ConsoleResult[],
  options: { machine: string; date: string; notes?: string[] },
): string[] {
  const [small, large] = [SIZES[0], SIZES[SIZES.length - 1]];
  const number = (n: number) => n.toLocaleString("en-US");
  const heads = results.flatMap((r) => [
    `${r.kind}, ${number(small)} keys`,
    `${r.kind}, ${number(large)} keys`,
    `${r.kind} ratio`,
  ]);
  const lines = [
    "# The console at 10 and 100,000 keys",
    "",
    `${options.date}, ${options.machine}. Each command through \`deno task -q keys\`, end to end (both Deno start-ups included), median of ${RUNS} runs; the two store sizes of a kind measured in turns within one run. Target: at ${
      number(large)
    } keys each command takes at most ${TARGET_RATIO} × its time at ${
      number(small)
    }.`,
    ...(options.notes ?? []).flatMap((note) => ["", note]),
    "",
    `| command | ${heads.join(" | ")} |`,
    `| --- | ${heads.map(() => "---:").join(" | ")} |`,
  ];
  const misses: string[] = [];
  for (const command of COMMANDS) {
    const cells = results.flatMap((r) => {
      const at = r.medians.get(command)!;
      const ratio = at.get(large)! / at.get(small)!;
      if (ratio > TARGET_RATIO) misses.push(`${command} (${r.kind})`);
      return [
        `${Math.round(at.get(small)!)} ms`,
        `${Math.round(at.get(large)!)} ms`,
        `${ratio.toFixed(2)}${ratio > TARGET_RATIO ? " **MISS**" : ""}`,
      ];
    });
    lines.push(`| \`keys ${command}\` | ${cells.join(" | ")} |`);
  }
  lines.push(
    "",
    `Filling the stores with \`keys import\`: ${
      results.map((r) =>
        `${r.kind} ${
          [...r.imports].map(([size, s]) =>
            `${s.toFixed(1)} s for ${number(size)} keys`
          ).join(", ")
        }`
      ).join("; ")
    }.`,
    "",
    misses.length === 0
      ? `Every command within ${TARGET_RATIO} ×: PASS.`
      : `Over ${TARGET_RATIO} ×: ${misses.join(", ")}.`,
  );
  return lines;
}

/** The machine, as the results name it. */
async function machine(): Promise<string> {
  // /proc files report a size of 0, so they are read through the shell.
  const out = await new Deno.Command("sh", {
    args: ["-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
    stdout: "piped",
    stderr: "null",
  }).output().catch(() => null);
  const cpu = new TextDecoder().decode(out?.stdout).trim() || "unknown CPU";
  const average = await new Deno.Command("sh", {
    args: ["-c", "cut -d' ' -f1 /proc/loadavg"],
    stdout: "piped",
    stderr: "null",
  }).output().catch(() => null);
  const loadText = new TextDecoder().decode(average?.stdout).trim();
  // Shared machines vary: the load says how much the figures may wander.
  const load = loadText === "" ? "" : `, load average ${loadText} at the end`;
  return `${cpu}, ${navigator.hardwareConcurrency} cores, ${Deno.build.os}, Deno ${Deno.version.deno}${load}`;
}

/** A PostgreSQL server for the bench: BENCH_DATABASE_URL, or a throwaway cluster. */
async function postgresServer(): Promise<
  { url: string; stop: () => Promise<void> } | string
> {
  const given = Deno.env.get("BENCH_DATABASE_URL");
  if (given) return { url: given, stop: () => Promise.resolve() };
  const script = new URL("../scripts/postgres_test_server.sh", import.meta.url)
    .pathname;
  const folder = await Deno.makeTempDir({ prefix: "keys_bench_pg_" });
  // The postgres user must be able to enter it when the bench runs as root.
  await Deno.chmod(folder, 0o755);
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  const started = await new Deno.Command("bash", {
    args: [script, "start", `${folder}/pg`, String(port)],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!started.success) {
    await Deno.remove(folder, { recursive: true });
    return `PostgreSQL left out: no throwaway server could start (${
      new TextDecoder().decode(started.stderr).trim().split("\n").at(-1)
    }); set BENCH_DATABASE_URL`;
  }
  return {
    url: new TextDecoder().decode(started.stdout).trim(),
    async stop() {
      await new Deno.Command("bash", {
        args: [script, "stop", `${folder}/pg`],
        stdout: "null",
        stderr: "null",
      }).output();
      await Deno.remove(folder, { recursive: true });
    },
  };
}

/** Measures both stores; returns the table's lines, written to BENCH_CONSOLE_OUTPUT when it is set. */
export async function measureConsole(): Promise<string[]> {
  if (RUNS < 1 || RUNS >= SIZES[0]) {
    throw new Error(
      `BENCH_CONSOLE_RUNS must be from 1 to ${
        SIZES[0] - 1
      }, one less than the smaller store`,
    );
  }
  const results: ConsoleResult[] = [];
  const notes: string[] = [];
  results.push(await measureKind({ name: "Deno KV", create: kvKind.create }));
  const server = await postgresServer();
  if (typeof server === "string") notes.push(server);
  else {
    try {
      const kind = postgresKind(server.url);
      notes.push(`PostgreSQL: ${await kind.describe()}.`);
      results.push(
        await measureKind({ name: "PostgreSQL", create: kind.create }),
      );
    } finally {
      await server.stop();
    }
  }
  const lines = consoleTable(results, {
    machine: await machine(),
    date: new Date().toISOString().slice(0, 10),
    notes,
  });
  if (OUTPUT !== undefined) {
    await Deno.writeTextFile(OUTPUT, lines.join("\n") + "\n");
    console.error(`Written to ${OUTPUT}`);
  }
  return lines;
}

if (import.meta.main) {
  console.log((await measureConsole()).join("\n"));
}
