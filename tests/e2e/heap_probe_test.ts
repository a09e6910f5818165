/**
 * The soak judges a leak by the live heap its probe reads through the
 * inspector after a full collection. The probe must see memory a process
 * keeps, and must not count garbage it dropped, or the soak's verdict means
 * nothing either way.
 */

import assert from "node:assert/strict";
import { connectHeapProbe, freePort } from "../../bench/_heap.ts";
import { tempDir } from "../support/processes.ts";

/**
 * A process that allocates 32 MB on each line it reads: objects it keeps
 * ("keep"), a buffer it keeps ("bytes", held outside V8's heap proper, as a
 * log batch would be), or objects it drops.
 */
const PROGRAM = `
const kept = [];
// Outside the async loop: a suspended async function's frame may hold on
// to its block's values.
function handle(word) {
  if (word === "bytes") return kept.push(new Uint8Array(32 << 20).fill(1));
  const arrays = Array.from({ length: 32 }, () => new Array(131072).fill(word.length));
  if (word === "keep") kept.push(arrays);
}
const lines = Deno.stdin.readable.pipeThrough(new TextDecoderStream());
console.log("ready");
for await (const chunk of lines) {
  for (const word of chunk.split("\\n").filter(Boolean)) {
    handle(word);
    console.log("done");
  }
}
`;

async function measure(word: "keep" | "bytes" | "drop"): Promise<number> {
  using dir = tempDir();
  const program = `${dir.path}/program.js`;
  Deno.writeTextFileSync(program, PROGRAM);
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-q", `--inspect=127.0.0.1:${port}`, program],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream())
    .getReader();
  const line = async (expected: string) => {
    const { value } = await lines.read();
    assert.equal(value?.trim(), expected);
  };
  const writer = child.stdin.getWriter();
  try {
    await line("ready");
    using probe = await connectHeapProbe(port);
    const before = await probe.liveBytes();
    await writer.write(new TextEncoder().encode(`${word}\n`));
    await line("done");
    return (await probe.liveBytes()) - before;
  } finally {
    // The probe is closed by now: with a session attached, the process
    // would not end on a signal.
    child.kill("SIGKILL");
    await child.status;
    await lines.cancel();
  }
}

Deno.test("the soak's heap probe sees objects and buffers a process keeps, and not garbage it dropped", async () => {
  const kept = await measure("keep");
  const bytes = await measure("bytes");
  const dropped = await measure("drop");
  // 32 arrays of 131,072 small integers, or one buffer: 32 MB held.
  assert.ok(kept > 24 * 1024 * 1024, `kept ${kept} bytes`);
  assert.ok(bytes > 24 * 1024 * 1024, `kept a buffer of ${bytes} bytes`);
  assert.ok(dropped < 4 * 1024 * 1024, `dropped ${dropped} bytes`);
});
