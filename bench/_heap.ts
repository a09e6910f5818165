/**
 * The live JavaScript heap of a server process, read through V8's
 * inspector after a full garbage collection.
 *
 * Resident memory says little about a leak over a short run: V8 lets its
 * old generation grow until its next major collection, so a server that
 * holds nothing still climbs for tens of seconds on a fast machine. What is
 * left after a forced collection is what the process really holds.
 *
 * @module
 */

/** A connection to one process's inspector. */
export interface HeapProbe extends Disposable {
  /**
   * Collects all garbage, then returns the bytes still held: the heap's
   * objects and the buffers behind them (ArrayBuffers, where a log batch
   * or a body would be kept), which V8 counts apart.
   */
  liveBytes(): Promise<number>;
}

/** A loopback port free at the time of asking, for `--inspect=127.0.0.1:PORT`. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

/**
 * Connects to the inspector a process opened with `--inspect=127.0.0.1:port`.
 * A call gives up after `timeoutMs` (30 s), and every call fails once the
 * process has gone, so a frozen or dead process never hangs the caller.
 */
export async function connectHeapProbe(
  port: number,
  options: { timeoutMs?: number } = {},
): Promise<HeapProbe> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`, {
    signal: AbortSignal.timeout(timeoutMs),
  })).json() as { webSocketDebuggerUrl: string }[];
  const socket = new WebSocket(targets[0].webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    socket.onopen = resolve;
    socket.onerror = () =>
      reject(new Error("the inspector refused to connect"));
  });
  let next = 0;
  let closed = false;
  const waiting = new Map<
    number,
    { resolve(reply: InspectorReply): void; reject(error: Error): void }
  >();
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data) as InspectorReply;
    waiting.get(message.id)?.resolve(message);
    waiting.delete(message.id);
  };
  socket.onclose = () => {
    closed = true;
    for (const { reject } of waiting.values()) {
      reject(new Error("the inspected process closed its inspector"));
    }
    waiting.clear();
  };
  const call = (method: string) =>
    new Promise<InspectorReply>((resolve, reject) => {
      if (closed) {
        return reject(new Error("the inspected process closed its inspector"));
      }
      const id = ++next;
      const timer = setTimeout(() => {
        waiting.delete(id);
        reject(new Error(`the inspector did not answer ${method} in time`));
      }, timeoutMs);
      const settle = <T>(done: (value: T) => void) => (value: T) => {
        clearTimeout(timer);
        done(value);
      };
      waiting.set(id, { resolve: settle(resolve), reject: settle(reject) });
      socket.send(JSON.stringify({ id, method }));
    });
  return {
    async liveBytes() {
      await call("HeapProfiler.collectGarbage");
      const reply = await call("Runtime.getHeapUsage");
      const { usedSize, backingStorageSize } = reply.result ?? {};
      if (usedSize === undefined || backingStorageSize === undefined) {
        throw new Error(
          `the inspector gave no heap usage: ${reply.error?.message}`,
        );
      }
      return usedSize + backingStorageSize;
    },
    [Symbol.dispose]() {
      socket.close();
    },
  };
}

interface InspectorReply {
  id: number;
  result?: { usedSize?: number; backingStorageSize?: number };
  error?: { message: string };
}
