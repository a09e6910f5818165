/**
 * What a flood of invented keys costs honest clients, as `deno task bench`
 * reports it: valid-key throughput while a second wrk floods the server
 * from many addresses with (1) checksum-valid keys that exist nowhere and
 * (2) malformed keys, at the same connection count. The issue's target is
 * (1) ≥ 80% of (2).
 *
 * The flood's addresses come through X-Forwarded-For from a trusted proxy
 * (127.0.0.1 in TRUSTED_PROXIES), one random address per request. The
 * lock-out is set out of reach: with it on, both floods would soon get
 * 429s and the rows would measure those instead of the key check.
 *
 * @module
 */

import { generateApiKey } from "../lib/auth/api_key.ts";

/** One measured pair of floods. */
export interface FloodResult {
  /** Valid-key requests/s under each flood. */
  validUnderInvented: number;
  validUnderMalformed: number;
  /** The floods' own requests/s. */
  invented: number;
  malformed: number;
  /** Every request wrk reported, warm-ups included, for the store calls per 1 000 requests. */
  requests: number;
}

const LUA = (keys: string[]) => `
local keys = { ${keys.map((k) => `"${k}"`).join(",")} }
math.randomseed(os.time())
request = function()
  local key = keys[math.random(#keys)]
  local from = string.format("10.%d.%d.%d", math.random(0, 255),
    math.random(0, 255), math.random(1, 254))
  return wrk.format("GET", nil, { ["X-API-Key"] = key,
    ["X-Forwarded-For"] = from })
end
`;

/** Runs wrk and returns its requests/s and how many requests it reported. */
async function rps(
  args: string[],
): Promise<{ rps: number; requests: number }> {
  const out = await new Deno.Command("wrk", {
    args: ["-t1", ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  return {
    rps: Number(text.match(/Requests\/sec:\s+([\d.]+)/)?.[1] ?? 0),
    requests: Number(text.match(/(\d+) requests in/)?.[1] ?? 0),
  };
}

/** Measures both floods against a running server at `url`. */
export async function measureFloods(
  url: string,
  options: {
    validKey: string;
    dir: string;
    seconds: number;
    connections: number;
  },
): Promise<FloodResult> {
  const invented = Array.from({ length: 2000 }, () => generateApiKey().key);
  // Same length and alphabet, but the checksum is off: refused before hashing.
  const malformed = invented.map((k) =>
    k.slice(0, -1) + (k.endsWith("0") ? "1" : "0")
  );
  const scripts = { invented, malformed };
  const result: Record<string, number> = {};
  let requests = 0;
  for (const [kind, keys] of Object.entries(scripts)) {
    const script = `${options.dir}/${kind}.lua`;
    await Deno.writeTextFile(script, LUA(keys));
    const seconds = `${options.seconds}s`;
    const conns = `-c${options.connections}`;
    const warmUp = await rps([conns, "-d1s", "-s", script, url]);
    const [flood, valid] = await Promise.all([
      rps([conns, `-d${seconds}`, "-s", script, url]),
      rps([conns, `-d${seconds}`, "-H", `X-API-Key: ${options.validKey}`, url]),
    ]);
    result[kind] = flood.rps;
    result[`valid_${kind}`] = valid.rps;
    requests += warmUp.requests + flood.requests + valid.requests;
  }
  return {
    validUnderInvented: result.valid_invented,
    validUnderMalformed: result.valid_malformed,
    invented: result.invented,
    malformed: result.malformed,
    requests,
  };
}
