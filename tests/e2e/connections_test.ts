/**
 * Connection floods against a real server at `ulimit -n 1024`: idle
 * connections, heads that never finish, bodies nobody reads. Each test holds
 * its attack while a valid key is checked, and bounds its own run time.
 */

import assert from "node:assert/strict";
import http from "node:http";
import { abortConnection, serveGuarded } from "../../lib/server/serve.ts";
import { statusFrom } from "../../scripts/from_address.ts";
import {
  createKey,
  type ServerProcess,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { GIVE_UP_MS, until } from "../support/wait.ts";

const ROUTE = "/api/v1/integration/connection";

/**
 * The server under `ulimit -n 1024`, as a small host runs it, with the
 * header and idle timeouts given in seconds (the defaults otherwise).
 */
function limitedServer(
  cwd: string,
  timeouts: { header?: number; idle?: number } = {},
): Promise<ServerProcess> {
  const env: Record<string, string> = {};
  if (timeouts.header !== undefined) {
    env.HEADER_TIMEOUT_SECONDS = String(timeouts.header);
  }
  if (timeouts.idle !== undefined) {
    env.IDLE_TIMEOUT_SECONDS = String(timeouts.idle);
  }
  return startServer(cwd, env, "start", { openFiles: 1024 });
}

/**
 * How late past its timeout a connection may close: the sweep's period
 * (lib/server/serve.ts, 500 ms for the timeouts here) and, on a busy machine, a
 * late accept and late timers. The timeouts the tests set lie further apart
 * than this, so a connection closed by the wrong one still fails.
 */
const LATE_S = 0.5 + 5;

/** Opens `count` TCP connections that send nothing; all must connect. */
async function openIdle(port: number, count: number): Promise<Deno.Conn[]> {
  const conns: Deno.Conn[] = [];
  for (let i = 0; i < count; i++) {
    conns.push(await Deno.connect({ hostname: "127.0.0.1", port }));
  }
  return conns;
}

/** Resolves with the seconds since `start` at which the server closed `conn`. */
async function closedAfter(conn: Deno.Conn, start: number): Promise<number> {
  const buffer = new Uint8Array(16 * 1024);
  try {
    while ((await conn.read(buffer)) !== null) {
      // A response or a 400 may come first; the close is what counts.
    }
  } catch {
    // A reset is a close too.
  }
  return (performance.now() - start) / 1000;
}

/** Waits at most `ms` for `promise`; undefined when it did not settle in time. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise,
    new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function closeAll(conns: Deno.Conn[]): void {
  for (const conn of conns) {
    try {
      conn.close();
    } catch {
      // closed by the server
    }
  }
}

/**
 * A valid key's status. The limit only ends a request the flood blocks for
 * good (the timeouts here are far longer): a slow 200 is still a 200.
 */
async function validStatus(url: string, key: string): Promise<number> {
  const response = await fetch(`${url}${ROUTE}`, {
    headers: { "X-API-Key": key },
    signal: AbortSignal.timeout(GIVE_UP_MS),
  });
  await response.body?.cancel();
  return response.status;
}

/** The server process has not exited. */
async function alive(process: Deno.ChildProcess): Promise<boolean> {
  return (await within(process.status, 50)) === undefined;
}

Deno.test("1 100 idle connections at ulimit -n 1024 neither stop the server nor keep a valid key from its 200, over HTTP/1.1 and HTTP/2", async () => {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "a");
  // Timeouts far beyond the test: only the cap and the accept loop are at work.
  await using server = await limitedServer(dir.path, {
    header: 600,
    idle: 600,
  });
  const idle = await openIdle(server.port, 1100);
  try {
    await new Promise((r) => setTimeout(r, 500));
    const statuses = [];
    for (let i = 0; i < 20; i++) {
      statuses.push(await validStatus(server.url, key));
      // A fresh wave of idle connections between requests, as an attacker would.
      idle.push(...await openIdle(server.port, 20));
    }
    assert.deepEqual(statuses, Array(20).fill(200));
    // HTTP/2 by prior knowledge goes through the same accept loop.
    using client = Deno.createHttpClient({ http1: false, http2: true });
    const h2 = await Promise.all(
      Array.from({ length: 10 }, () =>
        fetch(`${server.url}${ROUTE}`, {
          client,
          headers: { "X-API-Key": key },
          signal: AbortSignal.timeout(GIVE_UP_MS),
        }).then(async (response) => {
          await response.body?.cancel();
          return response.status;
        })),
    );
    assert.deepEqual(h2, Array(10).fill(200));
    assert(await alive(server.process), server.output());
    assert.doesNotMatch(server.output(), /could not start/);
  } finally {
    closeAll(idle);
  }
});

Deno.test("idle connections are closed after HEADER_TIMEOUT_SECONDS, kept-alive ones after IDLE_TIMEOUT_SECONDS", async () => {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "a");
  // Far enough apart that a connection closed by the other timeout, even
  // as late as LATE_S allows, fails.
  const header = 2;
  const idleTimeout = Math.ceil(header + LATE_S) + 3;
  await using server = await limitedServer(dir.path, {
    header,
    idle: idleTimeout,
  });
  const start = performance.now();
  const idle = await openIdle(server.port, 200);
  const keptAlive = await Deno.connect({
    hostname: "127.0.0.1",
    port: server.port,
  });
  await keptAlive.write(new TextEncoder().encode(
    `GET ${ROUTE} HTTP/1.1\r\nHost: x\r\nX-API-Key: ${key}\r\n\r\n`,
  ));
  const answered = new Uint8Array(4096);
  const n = await keptAlive.read(answered);
  const afterResponse = performance.now();
  assert.match(
    new TextDecoder().decode(answered.subarray(0, n ?? 0)),
    /^HTTP\/1\.1 200 /,
  );
  try {
    const idleClosed = await within(
      Promise.all(idle.map((conn) => closedAfter(conn, start))),
      (idleTimeout + LATE_S) * 1000,
    );
    assert(idleClosed, "idle connections still open past the idle timeout");
    assert(
      Math.min(...idleClosed) >= header - 0.1,
      `closed early: ${Math.min(...idleClosed)} s`,
    );
    assert(
      Math.max(...idleClosed) <= header + LATE_S,
      `closed late: ${Math.max(...idleClosed)} s`,
    );
    const keptAliveClosed = await within(
      closedAfter(keptAlive, afterResponse),
      (idleTimeout + LATE_S) * 1000,
    );
    assert(
      keptAliveClosed,
      "the kept-alive connection is still open past its timeout",
    );
    assert(
      keptAliveClosed >= idleTimeout - 0.1 &&
        keptAliveClosed <= idleTimeout + LATE_S,
      `${keptAliveClosed} s`,
    );
    assert.equal(await validStatus(server.url, key), 200);
  } finally {
    closeAll([...idle, keptAlive]);
  }
});

Deno.test("a head dribbled one byte every 200 ms is closed within HEADER_TIMEOUT_SECONDS", async () => {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "a");
  await using server = await limitedServer(dir.path, { header: 2, idle: 30 });
  const head = new TextEncoder().encode(
    `GET ${ROUTE} HTTP/1.1\r\nHost: x\r\nX-Slow: ${"a".repeat(1000)}`,
  );
  const start = performance.now();
  const conns = await openIdle(server.port, 100);
  let stop = false;
  const dribbling = conns.map(async (conn) => {
    for (let i = 0; i < head.length && !stop; i++) {
      try {
        await conn.write(head.subarray(i, i + 1));
      } catch {
        return;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  });
  try {
    // Dribbled to its end, a head would take 200 s: any close near the
    // timeout shows that the trickle did not keep it open.
    const closed = await within(
      Promise.all(conns.map((conn) => closedAfter(conn, start))),
      (2 + LATE_S) * 1000 + 1000,
    );
    assert(closed, "dribbling connections still open past the timeout");
    assert(
      Math.max(...closed) <= 2 + LATE_S,
      `closed late: ${Math.max(...closed)} s`,
    );
    assert.equal(await validStatus(server.url, key), 200);
  } finally {
    stop = true;
    closeAll(conns);
    await Promise.all(dribbling);
  }
});

Deno.test("a GET announcing a 10 GB body gets its answer and is cut off after a few MB; a small POST still gets its 405", async () => {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "a");
  await using server = await limitedServer(dir.path);
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
  await conn.write(new TextEncoder().encode(
    `GET ${ROUTE} HTTP/1.1\r\nHost: x\r\nX-API-Key: ${key}\r\nContent-Length: 10737418240\r\n\r\n`,
  ));
  let answer = "";
  const reading = (async () => {
    const buffer = new Uint8Array(4096);
    try {
      for (let n; (n = await conn.read(buffer)) !== null;) {
        answer += new TextDecoder().decode(buffer.subarray(0, n));
      }
    } catch {
      // reset after the answer
    }
  })();
  const chunk = new Uint8Array(1 << 20).fill(0x61);
  let sent = 0;
  let cutOff = false;
  try {
    // Bounded by size, not by time: a server that kept reading would take
    // all 64 MB, however fast or slow the machine.
    while (sent < 64 << 20) {
      sent += await conn.write(chunk);
    }
  } catch {
    cutOff = true;
  } finally {
    try {
      conn.close();
    } catch {
      // closed by the server
    }
  }
  await reading;
  assert(cutOff, `still reading after ${sent >> 20} MB`);
  // Socket buffers on both ends hold a few MB; the server reads almost nothing more.
  assert(sent < 64 << 20, `${sent >> 20} MB were taken`);
  assert.match(answer, /^HTTP\/1\.1 200 /);
  assert.match(answer, /\r\nconnection: close\r\n/i);
  assert.equal(await validStatus(server.url, key), 200);
  // A body that arrived whole is answered as before, the connection then closed.
  for (let i = 0; i < 5; i++) {
    const response = await fetch(`${server.url}${ROUTE}`, {
      method: "POST",
      body: "{}",
    });
    await response.body?.cancel();
    assert.equal(response.status, 405);
  }
});

/** A GET of the route with `key` through `agent`, and whether it reused a kept-alive connection. */
function keptAliveGet(
  port: number,
  key: string,
  agent: http.Agent,
): Promise<{ status: number; reused: boolean }> {
  return new Promise((resolve, reject) => {
    const request = http.get({
      host: "127.0.0.1",
      port,
      path: ROUTE,
      agent,
      headers: { "X-API-Key": key },
    }, (response) => {
      response.resume();
      response.on("end", () =>
        resolve({
          status: response.statusCode ?? 0,
          reused: request.reusedSocket,
        }));
    });
    request.on("error", reject);
  });
}

Deno.test("one address filling every slot with half-sent heads loses its own connections: another address keeps its kept-alive connection and gets 200 on it and on new ones", async () => {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "a");
  // Timeouts far beyond the test: only the cap decides who is closed.
  await using server = await startServer(
    dir.path,
    {
      MAX_CONNECTIONS: "20",
      HEADER_TIMEOUT_SECONDS: "600",
      IDLE_TIMEOUT_SECONDS: "600",
    },
    "start",
    { openFiles: 1024 },
  );
  const agent = new http.Agent({
    keepAlive: true,
    maxSockets: 1,
    localAddress: "127.0.0.2",
  } as http.AgentOptions);
  const attacker: Deno.Conn[] = [];
  let closed = 0;
  try {
    assert.equal((await keptAliveGet(server.port, key, agent)).status, 200);
    const half = new TextEncoder().encode(
      `GET ${ROUTE} HTTP/1.1\r\nHost: x\r\n`,
    );
    for (let wave = 1; wave <= 3; wave++) {
      // 40 more from 127.0.0.1 than the 19 slots the honest client leaves.
      for (const conn of await openIdle(server.port, 40)) {
        attacker.push(conn);
        conn.write(half).catch(() => {});
        closedAfter(conn, 0).then(() => closed++);
      }
      // Before: the honest connection, quiet longest, was the first closed.
      await until(() => closed >= 40 * wave - 20, `${40 * wave - 20} closes`);
      assert.deepEqual(
        await keptAliveGet(server.port, key, agent),
        { status: 200, reused: true },
        `wave ${wave}: the kept-alive connection was closed`,
      );
      assert.equal(
        await statusFrom(server.port, { from: "127.0.0.2", path: ROUTE, key }),
        200,
      );
    }
  } finally {
    agent.destroy();
    closeAll(attacker);
  }
});

Deno.test("one address holding every slot with requests in progress: a newcomer from another address is served, and a held connection is cut for it", async () => {
  let entered = 0;
  let release!: () => void;
  const gate = new Promise<void>((resolve) => release = resolve);
  const server = serveGuarded(async (_request, info) => {
    if ((info.remoteAddr as Deno.NetAddr).hostname === "127.0.0.1") {
      entered++;
      await gate;
    }
    return new Response("ok");
  }, {
    hostname: "127.0.0.1",
    port: 0,
    limits: { maxConnections: 20, headerTimeoutMs: 600_000 },
  });
  const port = (server.addr as Deno.NetAddr).port;
  const held: Promise<number | "cut">[] = [];
  const hold = () =>
    held.push(
      statusFrom(port, { from: "127.0.0.1", path: "/", key: null })
        .catch(() => "cut" as const),
    );
  const statuses: number[] = [];
  try {
    for (let i = 0; i < 20; i++) hold();
    await until(() => entered === 20, "20 requests held");
    for (let i = 1; i <= 3; i++) {
      // Before: every slot busy, so the newcomer was refused.
      statuses.push(
        await statusFrom(port, { from: "127.0.0.2", path: "/", key: null }),
      );
      // Once the honest connection is gone, the attacker takes the slot back.
      await until(() => server.connectionCount() === 19, "19 connections");
      hold();
      await until(() => entered === 20 + i, "the slot taken back");
    }
  } finally {
    release();
    await server.shutdown();
  }
  assert.deepEqual(statuses, [200, 200, 200]);
  const outcomes = await Promise.all(held);
  assert.equal(outcomes.filter((outcome) => outcome === "cut").length, 3);
});

/**
 * Churns connections near the cap from a second process: most closed
 * gracefully, some reset (SO_LINGER 0), so the server sheds connections
 * whose peers are already gone. Python, because Deno cannot send a reset.
 */
const CHURN = `
import socket, struct, sys, time, collections, resource
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
port, seconds, hold, reset = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
q = collections.deque(); end = time.time() + seconds
while time.time() < end:
    try:
        s = socket.socket()
        if reset: s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.settimeout(1); s.connect(("127.0.0.1", port)); q.append(s)
    except OSError:
        pass
    while len(q) > hold: q.popleft().close()
for s in q: s.close()
`;

const python = await new Deno.Command("sh", {
  args: ["-c", "command -v python3"],
  stdout: "null",
}).output().then((o) => o.success, () => false);

Deno.test({
  name:
    "churning connections at the cap, some reset by their peers, does not end the server",
  ignore: !python,
  async fn() {
    using dir = tempDir();
    const { key } = await createKey(dir.path, "steady");
    await using server = await limitedServer(dir.path);
    const churn = (hold: number, reset: boolean) =>
      new Deno.Command("python3", {
        args: [
          "-c",
          CHURN,
          String(server.port),
          "8",
          String(hold),
          reset ? "1" : "0",
        ],
        stdout: "null",
        stderr: "null",
      }).output();
    // The shape that ended the process before: 880 held with graceful
    // closes beside 150 held with resets, against a cap of 900.
    const attack = Promise.all([churn(880, false), churn(150, true)]);
    const statuses: number[] = [];
    const deadline = Date.now() + 8000;
    while (Date.now() < deadline) {
      statuses.push(await validStatus(server.url, key).catch(() => 0));
      await new Promise((r) => setTimeout(r, 500));
    }
    await attack;
    assert.equal(
      await within(server.process.status, 100),
      undefined,
      "the server exited",
    );
    assert.equal(await validStatus(server.url, key), 200);
    assert.doesNotMatch(server.output(), /Uncaught/);
  },
});

Deno.test("aborting a connection whose resource Deno already freed does not end the process, and other errors still surface", () => {
  const gone = new AbortController();
  gone.signal.addEventListener("abort", () => {
    // What Deno's listener throws when the peer's reset freed the resource first.
    throw new Deno.errors.BadResource("Bad resource ID");
  });
  abortConnection(gone); // the test runner fails on an uncaught error
  assert.ok(gone.signal.aborted);

  let seen: unknown;
  const other = (event: ErrorEvent) => {
    seen = event.error;
    event.preventDefault();
  };
  globalThis.addEventListener("error", other);
  try {
    const broken = new AbortController();
    broken.signal.addEventListener("abort", () => {
      throw new TypeError("a real bug");
    });
    abortConnection(broken);
  } finally {
    globalThis.removeEventListener("error", other);
  }
  assert.ok(seen instanceof TypeError, "only BadResource is kept quiet");
});
