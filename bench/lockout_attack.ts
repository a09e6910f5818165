/**
 * `deno task bench:lockout`: the lock-out attacked as issue 29 describes,
 * at full scale, against a real server with the default settings, on
 * loopback only. Prints what honest clients with valid keys got.
 *
 * Each request is one TCP connection bound to its own address in
 * 127.0.0.0/8 (tests/support/from_address.ts), so the server sees every
 * address as a separate client:
 *
 * 1. 2 000 integrators authenticate (established clients);
 * 2. with `--own-key`: the attacker's own valid key authenticates from
 *    10 500 fresh addresses first (what emptied the old remembered-honest
 *    table);
 * 3. invented, checksum-valid keys from 90 000 addresses, 99 per /24 (no
 *    network lock needed to pass the global level);
 * 4. 2 000 new integrators and the 2 000 established ones call once each;
 * 5. one address sends 30 invented keys: how many 401s before 429.
 *
 * Then valid-key throughput while wrk floods through a trusted proxy with
 * checksum-valid keys, against the same with malformed keys, at the
 * default lock-out (bench/flood.ts).
 *
 * Environment: ATTACK_ADDRESSES (90000; 0 skips the attacks),
 * ATTACK_OWN_KEY_ADDRESSES (10500), ATTACK_HONEST (2000),
 * ATTACK_FLOOD_SECONDS (10; 0 skips the wrk part).
 *
 * @module
 */

import { generateApiKey } from "../lib/auth/api_key.ts";
import { createKey, startServer, tempDir } from "../scripts/task_process.ts";
import { sendAll, spreadAddress, statusFrom } from "../scripts/from_address.ts";
import { measureFloods } from "./flood.ts";

const ROUTE = "/api/v1/integration/connection";
const ADDRESSES = Number(Deno.env.get("ATTACK_ADDRESSES") ?? 90_000);
const OWN_KEY_ADDRESSES = Number(
  Deno.env.get("ATTACK_OWN_KEY_ADDRESSES") ?? 10_500,
);
const HONEST = Number(Deno.env.get("ATTACK_HONEST") ?? 2_000);
const FLOOD_SECONDS = Number(Deno.env.get("ATTACK_FLOOD_SECONDS") ?? 10);

/** What the honest clients got after one attack. */
interface Outcome {
  label: string;
  floodSeconds: number;
  flood: Map<number, number>;
  established: Map<number, number>;
  newcomers: Map<number, number>;
  loop401s: number;
}

function share(statuses: Map<number, number>, status: number): string {
  let total = 0;
  for (const count of statuses.values()) total += count;
  return `${(100 * (statuses.get(status) ?? 0) / total).toFixed(2)}%`;
}

async function attack(ownKey: boolean): Promise<Outcome> {
  using dir = tempDir();
  const honest = await createKey(dir.path, "honest");
  const attackers = await createKey(dir.path, "attackers-own");
  await using server = await startServer(dir.path, {}, "start", {
    keepOutput: false,
  });
  const get = (from: string, key: string | null) =>
    statusFrom(server.port, { from, path: ROUTE, key });
  const established = (i: number) =>
    spreadAddress(i, { first: 200, perNetwork: 50 });
  await sendAll(HONEST, (i) => get(established(i), honest.key));
  if (ownKey) {
    await sendAll(
      OWN_KEY_ADDRESSES,
      (i) =>
        get(spreadAddress(i, { first: 160, perNetwork: 250 }), attackers.key),
    );
  }
  console.error(`  flooding from ${ADDRESSES} addresses …`);
  const started = performance.now();
  const flood = await sendAll(
    ADDRESSES,
    (i) =>
      get(
        spreadAddress(i, { first: 10, perNetwork: 99 }),
        generateApiKey().key,
      ),
    { concurrency: 64 },
  );
  const floodSeconds = (performance.now() - started) / 1000;
  const newcomers = await sendAll(
    HONEST,
    (i) => get(spreadAddress(i, { first: 120, perNetwork: 99 }), honest.key),
  );
  const again = await sendAll(HONEST, (i) => get(established(i), honest.key));
  let loop401s = 0;
  for (let i = 0; i < 30; i++) {
    if (await get("127.250.0.1", generateApiKey().key) === 401) loop401s++;
  }
  return {
    label: ownKey
      ? `own key from ${OWN_KEY_ADDRESSES} addresses, then the flood`
      : "the flood alone",
    floodSeconds,
    flood,
    established: again,
    newcomers,
    loop401s,
  };
}

async function throughput(): Promise<string[]> {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "honest");
  await using server = await startServer(
    dir.path,
    {
      TRUSTED_PROXIES: "127.0.0.1",
    },
    "start",
    { keepOutput: false },
  );
  const lines: string[] = [];
  // Two rounds: a shared machine's load moves between the two floods of
  // one round, and a second round shows how far.
  for (const round of [1, 2]) {
    const result = await measureFloods(server.url + ROUTE, {
      validKey: key,
      dir: dir.path,
      seconds: FLOOD_SECONDS,
      connections: 32,
    });
    const ratio = result.validUnderInvented / result.validUnderMalformed;
    lines.push(
      `Round ${round}: valid-key requests/s ${
        Math.round(result.validUnderInvented)
      } under checksum-valid invented keys (the flood ${
        Math.round(result.invented)
      }/s), ${
        Math.round(result.validUnderMalformed)
      } under malformed keys (the flood ${Math.round(result.malformed)}/s): ${
        (100 * ratio).toFixed(1)
      }% (target at least 80%)`,
    );
  }
  return lines;
}

if (import.meta.main) {
  const lines: string[] = [];
  for (const ownKey of ADDRESSES > 0 ? [false, true] : []) {
    console.error(ownKey ? "Attack with the attacker's own key:" : "Attack:");
    const o = await attack(ownKey);
    lines.push(
      `${o.label}: ${ADDRESSES} addresses in ${o.floodSeconds.toFixed(0)} s (${
        share(o.flood, 401)
      } 401, ${share(o.flood, 429)} 429); ` +
        `${HONEST} new integrators ${share(o.newcomers, 200)} 200, ` +
        `${HONEST} established ${share(o.established, 200)} 200; ` +
        `one address's loop: ${o.loop401s} × 401 of 30`,
    );
  }
  if (FLOOD_SECONDS > 0) lines.push(...await throughput());
  console.log(lines.join("\n"));
}
