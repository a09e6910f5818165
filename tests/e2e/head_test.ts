/**
 * HEAD with real clients over every protocol the server speaks: curl over
 * HTTP/1.1, HTTP/2 with prior knowledge (h2c) and HTTP/2 over TLS chosen by
 * ALPN. Every route and every refusal answers HEAD with the GET's status and
 * headers and no body; over HTTP/2 a body on a HEAD fails the client's
 * request (curl exit 92, PROTOCOL_ERROR).
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { LIVE_PATH } from "../../lib/routes/health.ts";
import {
  createKey,
  makeTlsFiles,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { ROUTES } from "../support/route_table.ts";
import { GIVE_UP_MS } from "../support/wait.ts";

/** Why the test cannot run here, or null when curl and openssl can do it. */
async function missingTools(): Promise<string | null> {
  for (const [command, args] of [["curl", ["-V"]], ["openssl", ["version"]]]) {
    let output;
    try {
      output = await new Deno.Command(command as string, {
        args: args as string[],
        stdout: "piped",
        stderr: "null",
      }).output();
    } catch {
      return `${command} is not installed`;
    }
    if (!output.success) return `${command} does not run`;
    if (
      command === "curl" &&
      !/^Features:.*\bHTTP2\b/m.test(new TextDecoder().decode(output.stdout))
    ) {
      return "curl was built without HTTP/2";
    }
  }
  return null;
}

const missing = await missingTools();
const CI = Deno.env.get("CI") === "true";
if (missing && !CI) {
  console.error(
    `head_test.ts skipped: ${missing} (apt-get install -y curl openssl; .ci/run has them); under CI=true it fails instead`,
  );
}

/** What curl saw of one exchange. */
interface Seen {
  code: number;
  stderr: string;
  /** "1.1" or "2". */
  version: string;
  status: number;
  /** Lower-case names; the per-request ones (date, x-request-id) left out. */
  headers: Record<string, string>;
  /** What curl counted of the body (with --head, whatever came after the head). */
  bodyBytes: number;
}

/** How to reach the server in one protocol: curl's options and a base URL. */
interface Protocol {
  name: string;
  version: string;
  args: string[];
  base: string;
}

async function exchange(
  protocol: Protocol,
  method: "GET" | "HEAD",
  target: { path: string; headers: Record<string, string> },
  folder: string,
): Promise<Seen> {
  const headerFile = `${folder}/headers`;
  const args = [
    "--silent",
    "--show-error",
    "--max-time",
    "5",
    ...protocol.args,
    ...(method === "HEAD" ? ["--head"] : []),
    "--dump-header",
    headerFile,
    "--output",
    "/dev/null",
    "--write-out",
    "%{http_version} %{size_download}",
    ...Object.entries(target.headers).flatMap(([name, value]) => [
      "--header",
      `${name}: ${value}`,
    ]),
    protocol.base + target.path,
  ];
  const output = await new Deno.Command("curl", {
    args,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const head = await Deno.readTextFile(headerFile).catch(() => "");
  const lines = head.split("\r\n").filter((line) => line !== "");
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    const name = line.slice(0, colon).toLowerCase();
    if (name === "date" || name === "x-request-id") continue;
    headers[name] = line.slice(colon + 1).trim();
  }
  const [version, size] = new TextDecoder().decode(output.stdout).split(" ");
  return {
    code: output.code,
    stderr: new TextDecoder().decode(output.stderr),
    version,
    status: Number(lines[0]?.split(" ")[1] ?? 0),
    headers,
    bodyBytes: Number(size),
  };
}

/**
 * The bytes an HTTP/1.1 server sends for a HEAD followed on the same
 * connection by a GET: whatever follows the HEAD's head must be the next
 * response, so a body sent on the HEAD shows up there.
 */
async function afterHeadOnOneConnection(
  port: number,
  target: { path: string; headers: Record<string, string> },
): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const extra = Object.entries(target.headers)
    .map(([name, value]) => `${name}: ${value}\r\n`).join("");
  await conn.write(
    new TextEncoder().encode(
      `HEAD ${target.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${extra}\r\n` +
        `GET ${LIVE_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
    ),
  );
  // The server closes after the second answer (Connection: close); the
  // timer only ends a wait for one that never does.
  const timer = setTimeout(() => conn.close(), GIVE_UP_MS);
  let text = "";
  try {
    const buffer = new Uint8Array(16_384);
    for (;;) {
      const read = await conn.read(buffer);
      if (read === null) break;
      text += new TextDecoder().decode(buffer.subarray(0, read));
    }
  } catch {
    // Closed by the timer: what arrived is judged below.
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch {
      // Already closed.
    }
  }
  return text.slice(text.indexOf("\r\n\r\n") + 4);
}

Deno.test({
  name:
    "HEAD on every route and every refusal answers like GET without a body over HTTP/1.1, h2c and HTTP/2 over TLS",
  ignore: missing !== null && !CI,
  async fn() {
    if (missing) throw new Error(`head_test.ts cannot run: ${missing}`);
    using dir = tempDir();
    const tls = `${dir.path}/data/tls`;
    await Deno.mkdir(tls, { recursive: true });
    await makeTlsFiles(tls);
    const { key } = await createKey(dir.path, "head-check", "ops@example.com");
    // Refusals below would otherwise lock 127.0.0.1 out half-way.
    const env = { HOST: "127.0.0.1", LOCKOUT_MAX_FAILURES: "1000" };
    await using plain = await startServer(dir.path, env);
    await using secure = await startServer(dir.path, {
      ...env,
      TLS_CERT_FILE: "./data/tls/cert.pem",
      TLS_KEY_FILE: "./data/tls/key.pem",
    });
    const protocols: Protocol[] = [
      {
        name: "HTTP/1.1",
        version: "1.1",
        args: ["--http1.1"],
        base: plain.url,
      },
      {
        name: "h2c",
        version: "2",
        args: ["--http2-prior-knowledge"],
        base: plain.url,
      },
      {
        name: "HTTP/2 over TLS",
        version: "2",
        args: ["--http2", "--cacert", `${tls}/ca.pem`],
        base: `https://127.0.0.1:${secure.port}`,
      },
    ];
    const invented = generateApiKey().key;
    // Every route of the table that answers GET: an authenticated one with
    // a valid key, without one, with an invented one and with one in its URL.
    type Target = {
      path: string;
      headers: Record<string, string>;
      status: number;
    };
    const targets: Target[] = [
      ...ROUTES.filter((route) => route.methods.GET).flatMap((route) =>
        route.auth === "api_key"
          ? [
            { path: route.path, headers: { "X-API-Key": key }, status: 200 },
            { path: route.path, headers: {}, status: 401 },
            {
              path: route.path,
              headers: { "X-API-Key": invented },
              status: 401,
            },
            {
              path: `${route.path}?api_key=${invented}`,
              headers: {},
              status: 400,
            },
          ]
          : [{ path: route.path, headers: {}, status: 200 }] as Target[]
      ),
      { path: "/api/v1/no-such-route", headers: {}, status: 404 },
    ];
    assert.ok(targets.length >= 8, "the route table was read");
    for (const protocol of protocols) {
      for (const target of targets) {
        // The path alone names the case: a key never goes into a message.
        const where = `${protocol.name} ${
          target.path.replace(invented, "<key>")
        } (${target.status})`;
        const get = await exchange(protocol, "GET", target, dir.path);
        assert.equal(get.code, 0, `GET ${where}: ${get.stderr}`);
        assert.equal(get.version, protocol.version, `GET ${where}`);
        assert.equal(get.status, target.status, `GET ${where}`);
        const head = await exchange(protocol, "HEAD", target, dir.path);
        assert.equal(head.code, 0, `HEAD ${where}: curl ${head.stderr}`);
        assert.equal(head.version, protocol.version, `HEAD ${where}`);
        assert.equal(head.status, get.status, `HEAD ${where}`);
        assert.deepEqual(head.headers, get.headers, `HEAD ${where}`);
        assert.equal(head.bodyBytes, 0, `HEAD ${where}`);
        if (get.bodyBytes > 0) {
          assert.equal(
            head.headers["content-length"],
            String(get.bodyBytes),
            `HEAD ${where} announces the GET's length`,
          );
        }
      }
    }
    for (const target of targets) {
      const next = await afterHeadOnOneConnection(plain.port, target);
      assert.match(
        next,
        /^HTTP\/1\.1 200 /,
        `HTTP/1.1 HEAD ${
          target.path.replace(invented, "<key>")
        } is followed by the next response, not a body`,
      );
    }
  },
});
