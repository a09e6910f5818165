import assert from "node:assert/strict";
import {
  ConfigError,
  envFileNames,
  rangeProblem,
  readConfig,
  readStoreLocation,
} from "../../lib/server/config.ts";
import {
  type CidrProblem,
  cidrProblem,
  formatCidr,
  parseCidr,
} from "../../lib/net/ip.ts";

const env = (vars: Record<string, string>) => (name: string) => vars[name];

Deno.test("readConfig() defaults to 0.0.0.0:8000, ./data/keys.db, no proxy, 10 failures a minute lock for 5 minutes, 10 s heads, 30 s idle, 900 connections", () => {
  assert.deepEqual(readConfig(env({})), {
    port: 8000,
    hostname: "0.0.0.0",
    reusePort: false,
    socketPath: null,
    store: { kind: "kv", path: "./data/keys.db" },
    trustedProxies: [],
    lockout: { maxFailures: 10, windowSeconds: 60, lockSeconds: 300 },
    tls: null,
    connections: {
      headerTimeoutSeconds: 10,
      idleTimeoutSeconds: 30,
      maxConnections: 900,
    },
    metrics: null,
    leakedKeyAction: "revoke",
    webhooks: { hosts: [], retrySeconds: 5, expiringDays: [14, 1] },
  });
});

Deno.test("readConfig() takes the connection limits and refuses 0", () => {
  const config = readConfig(env({
    HEADER_TIMEOUT_SECONDS: "5",
    IDLE_TIMEOUT_SECONDS: "75",
    MAX_CONNECTIONS: "200",
  }));
  assert.deepEqual(config.connections, {
    headerTimeoutSeconds: 5,
    idleTimeoutSeconds: 75,
    maxConnections: 200,
  });
  for (
    const name of [
      "HEADER_TIMEOUT_SECONDS",
      "IDLE_TIMEOUT_SECONDS",
      "MAX_CONNECTIONS",
    ]
  ) {
    assert.throws(() => readConfig(env({ [name]: "0" })), (error: Error) => {
      assert(error instanceof ConfigError);
      assert.match(
        error.message,
        new RegExp(`^${name} must be a whole number from 1 `),
      );
      return true;
    });
  }
});

Deno.test("readConfig() takes the lock-out, proxy and TLS variables", () => {
  const config = readConfig(env({
    TRUSTED_PROXIES: "10.0.0.5, fd00::/64",
    LOCKOUT_MAX_FAILURES: "5",
    LOCKOUT_WINDOW_SECONDS: "30",
    LOCKOUT_SECONDS: "900",
    TLS_CERT_FILE: "./data/tls/cert.pem",
    TLS_KEY_FILE: "./data/tls/key.pem",
  }));
  assert.deepEqual(config.trustedProxies.map(formatCidr), [
    "10.0.0.5/32",
    "fd00::/64",
  ]);
  assert.deepEqual(config.lockout, {
    maxFailures: 5,
    windowSeconds: 30,
    lockSeconds: 900,
  });
  assert.deepEqual(config.tls, {
    certFile: "./data/tls/cert.pem",
    keyFile: "./data/tls/key.pem",
  });
});

Deno.test("readConfig() takes PORT, HOST and DENO_KV_PATH", () => {
  const config = readConfig(
    env({ PORT: "9000", HOST: "127.0.0.1", DENO_KV_PATH: ":memory:" }),
  );
  assert.equal(config.port, 9000);
  assert.equal(config.hostname, "127.0.0.1");
  assert.deepEqual(config.store, { kind: "kv", path: ":memory:" });
  assert.equal(readConfig(env({ HOST: "[::1]" })).hostname, "::1");
});

Deno.test("readConfig() stops on a bad value with one line naming the variable", () => {
  const bad: [Record<string, string>, RegExp][] = [
    [
      { PORT: "eighty" },
      /^PORT must be a whole number from 0 to 65535, not "eighty"$/,
    ],
    [{ PORT: "70000" }, /^PORT must be a whole number/],
    [{ PORT: "-1" }, /^PORT must be a whole number/],
    [{ HOST: "http://x" }, /^HOST must be an IP address or host name/],
    [
      { DENO_KV_PATH: "data/" },
      /^DENO_KV_PATH must be a file path, ":memory:" or a URL/,
    ],
    [{ DENO_KV_PATH: "ftp://x/y" }, /^DENO_KV_PATH must be a file path/],
    [
      { LOCKOUT_MAX_FAILURES: "0" },
      /^LOCKOUT_MAX_FAILURES must be a whole number from 1/,
    ],
    // A lock ending inside the window would let one more 401 through at
    // each end: 23 × 401 in 15 s at 10 a minute with 1 s locks.
    [
      { LOCKOUT_SECONDS: "1" },
      /^LOCKOUT_SECONDS \(1\) is shorter than LOCKOUT_WINDOW_SECONDS \(60\), .*set LOCKOUT_SECONDS to 60 or more$/,
    ],
    [
      { TRUSTED_PROXIES: "10.0.0.1/8" },
      /^TRUSTED_PROXIES must list addresses or CIDR ranges .*"10\.0\.0\.1\/8" is not one/,
    ],
    [
      { TRUSTED_PROXIES: "10.0.0.1/99" },
      /"10\.0\.0\.1\/99" is not one \(its prefix length is at most 32 for IPv4 and 128 for IPv6\)$/,
    ],
    [{ TRUSTED_PROXIES: "proxy.local" }, /^TRUSTED_PROXIES must list/],
    [
      { TLS_CERT_FILE: "c.pem" },
      /^TLS_CERT_FILE and TLS_KEY_FILE must be set together; TLS_KEY_FILE is missing$/,
    ],
  ];
  for (const [vars, message] of bad) {
    assert.throws(() => readConfig(env(vars)), (e: Error) => {
      assert.ok(e instanceof ConfigError);
      assert.match(e.message, message);
      assert.ok(!e.message.includes("\n") && !e.message.endsWith("."));
      return true;
    });
  }
});

Deno.test("a range that is refused is refused for the part at fault: the address, the prefix length, or the host bits", () => {
  const cases: [string, CidrProblem | null][] = [
    ["10.0.0.0/8", null],
    ["10.0.0.1/8", "host_bits_set"],
    ["10.0.0.1/99", "prefix_too_long"],
    ["fd00::/129", "prefix_too_long"],
    ["1.2.3.4/032", "prefix_malformed"],
    ["1.2.3.4/", "prefix_malformed"],
    ["proxy.local", "not_an_address"],
    ["fd00::1/64", "host_bits_set"],
  ];
  for (const [text, problem] of cases) {
    assert.equal(cidrProblem(text), problem, text);
    assert.equal(parseCidr(text) === null, problem !== null, text);
  }
});

Deno.test("DATABASE_URL and DENO_KV_PATH both set says which one .env sets, and what to remove", () => {
  const both = env({
    DATABASE_URL: "postgres://keys@127.0.0.1:5432/keys",
    DENO_KV_PATH: "./data/keys.db",
  });
  const message = (inFile: string[]) => {
    try {
      readStoreLocation(both, { envFileNames: () => new Set(inFile) });
    } catch (error) {
      assert.ok(error instanceof ConfigError);
      return error.message;
    }
    throw new Error("both stores were accepted");
  };
  assert.match(
    message(["DENO_KV_PATH", "PORT"]),
    /^DATABASE_URL is set in the environment and DENO_KV_PATH in \.env, .*; remove DENO_KV_PATH from \.env, or unset DATABASE_URL/,
  );
  assert.match(
    message(["DATABASE_URL"]),
    /^DENO_KV_PATH is set in the environment and DATABASE_URL in \.env/,
  );
  assert.match(message(["DATABASE_URL", "DENO_KV_PATH"]), /both set in \.env/);
  assert.match(message([]), /both set in the environment \(not in \.env\)/);
});

Deno.test("envFileNames reads the names .env defines, export lines included, and nothing when there is none", () => {
  using dir = {
    path: Deno.makeTempDirSync(),
    [Symbol.dispose]() {
      Deno.removeSync(this.path, { recursive: true });
    },
  };
  const path = `${dir.path}/.env`;
  assert.deepEqual([...envFileNames({ path })], []);
  Deno.writeTextFileSync(
    path,
    "# a comment\nDENO_KV_PATH=./data/keys.db\nexport PORT = 8001\n\nNOT A LINE\n",
  );
  assert.deepEqual([...envFileNames({ path })].sort(), [
    "DENO_KV_PATH",
    "PORT",
  ]);
});

Deno.test("readConfig() shares the port only with REUSE_PORT=1", () => {
  assert.equal(readConfig(env({ REUSE_PORT: "1" })).reusePort, true);
  assert.equal(readConfig(env({ REUSE_PORT: "0" })).reusePort, false);
  assert.throws(
    () => readConfig(env({ REUSE_PORT: "yes" })),
    (error: Error) =>
      error instanceof ConfigError &&
      /^REUSE_PORT must be a whole number from 0 to 1/.test(error.message),
  );
});

Deno.test("readConfig() takes SOCKET_PATH as an absolute path that fits a Unix socket address", () => {
  assert.equal(
    readConfig(env({ SOCKET_PATH: "/run/integration/service.sock" }))
      .socketPath,
    "/run/integration/service.sock",
  );
  for (
    const bad of [
      "service.sock",
      "./data/s.sock",
      "/run/",
      "/" + "a".repeat(107),
    ]
  ) {
    assert.throws(
      () => readConfig(env({ SOCKET_PATH: bad })),
      (error: Error) =>
        error instanceof ConfigError &&
        /^SOCKET_PATH must be an absolute file path/.test(error.message),
      bad,
    );
  }
});

Deno.test("a range with a leading zero in an IPv4 number is refused for the zero, as octal, with the range without it to write", () => {
  const cases: [string, string][] = [
    ["010.0.0.0/8", "write 10.0.0.0/8"],
    ["192.168.001.0/24", "write 192.168.1.0/24"],
    ["::ffff:010.0.0.1", "write ::ffff:10.0.0.1"],
    // Without the zero it is still no range: no guess is offered.
    ["010.1.0.0/8", "write each number without them"],
  ];
  for (const [text, fix] of cases) {
    assert.equal(cidrProblem(text), "leading_zero", text);
    assert.equal(parseCidr(text), null, text);
    const zeroed = /(^|\.)(0\d+)/.exec(text.replace(/^::ffff:/, ""))![2];
    assert.equal(
      rangeProblem(text),
      `leading zeros are not allowed, as ${zeroed} may be read as octal: ${fix}`,
    );
  }
  // IPv6 groups may have leading zeros, and hex or a bad prefix is no octal.
  assert.equal(cidrProblem("2001:0db8::/32"), null);
  assert.equal(cidrProblem("0x10.0.0.0/8"), "not_an_address");
  assert.equal(cidrProblem("10.0.0.0/08"), "prefix_malformed");
  assert.throws(
    () => readConfig(env({ TRUSTED_PROXIES: "010.0.0.5" })),
    (error: unknown) =>
      error instanceof ConfigError &&
      error.message.endsWith(
        '"010.0.0.5" is not one (leading zeros are not allowed, as 010 may be read as octal: write 10.0.0.5)',
      ),
  );
});

Deno.test("readConfig() serves metrics only when METRICS_PORT is set, on loopback unless METRICS_HOST says otherwise", () => {
  assert.equal(readConfig(env({})).metrics, null);
  assert.deepEqual(readConfig(env({ METRICS_PORT: "9464" })).metrics, {
    hostname: "127.0.0.1",
    port: 9464,
  });
  assert.deepEqual(
    readConfig(env({ METRICS_PORT: "9464", METRICS_HOST: "::1" })).metrics,
    { hostname: "::1", port: 9464 },
  );
  assert.throws(
    () => readConfig(env({ METRICS_PORT: "http" })),
    (error: Error) =>
      /^METRICS_PORT must be a whole number/.test(error.message),
  );
});

Deno.test("readConfig() refuses METRICS_PORT equal to PORT on an address they share, naming both; another address may share the number", () => {
  const refused = (vars: Record<string, string>) =>
    assert.throws(
      () => readConfig(env(vars)),
      (error: unknown) =>
        error instanceof ConfigError &&
        /^METRICS_PORT is PORT \(8000\)/.test(error.message) &&
        error.message.includes("set METRICS_PORT to a port of its own"),
    );
  refused({ PORT: "8000", METRICS_PORT: "8000" });
  refused({ PORT: "8000", HOST: "127.0.0.1", METRICS_PORT: "8000" });
  refused({
    PORT: "8000",
    HOST: "::1",
    METRICS_HOST: "::",
    METRICS_PORT: "8000",
  });
  assert.equal(
    readConfig(env({
      PORT: "8000",
      HOST: "10.0.0.5",
      METRICS_PORT: "8000",
    })).metrics?.port,
    8000,
  );
  assert.equal(
    readConfig(env({ PORT: "0", METRICS_PORT: "0" })).metrics?.port,
    0,
  );
});

Deno.test("readConfig() revokes a reported leaked key unless LEAKED_KEY_ACTION=notify, and refuses any other action", () => {
  assert.equal(readConfig(env({})).leakedKeyAction, "revoke");
  assert.equal(
    readConfig(env({ LEAKED_KEY_ACTION: "notify" })).leakedKeyAction,
    "notify",
  );
  assert.throws(
    () => readConfig(env({ LEAKED_KEY_ACTION: "delete" })),
    (error: Error) =>
      error.message ===
        'LEAKED_KEY_ACTION must be revoke or notify, not "delete"',
  );
});

Deno.test("readConfig() reads the webhook hosts, retry delay and expiry reminders, and refuses a host list or days it cannot use", () => {
  assert.deepEqual(
    readConfig(env({
      WEBHOOK_HOSTS: "hooks.example.com, 127.0.0.1:8080,[::1]:9000",
      WEBHOOK_RETRY_SECONDS: "0.05",
      WEBHOOK_EXPIRING_DAYS: "30,7,1",
    })).webhooks,
    {
      hosts: ["hooks.example.com", "127.0.0.1:8080", "[::1]:9000"],
      retrySeconds: 0.05,
      expiringDays: [30, 7, 1],
    },
  );
  for (
    const bad of [
      { WEBHOOK_HOSTS: "https://hooks.example.com/x" } as Record<
        string,
        string
      >,
      { WEBHOOK_RETRY_SECONDS: "0" },
      { WEBHOOK_EXPIRING_DAYS: "14,half" },
    ]
  ) {
    assert.throws(
      () => readConfig(env(bad)),
      (error: Error) =>
        error.message.startsWith(Object.keys(bad)[0]) &&
        !error.message.endsWith("."),
    );
  }
});
