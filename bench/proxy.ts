/**
 * The deployment docs/operators.md recommends facing the internet, for the
 * benchmark: nginx from the shipped deploy/nginx.conf (TLS and HTTP/2 at
 * nginx, plain HTTP/1.1 to the service on loopback), with only its "SET"
 * lines changed, and the per-address connection cap raised, as every
 * benchmark connection comes from 127.0.0.1 (the shipped 100 would refuse
 * the 128-connection rows). The certificate is a throwaway one signed by a
 * throwaway CA (scripts/tls_files.ts): wrk does not verify it.
 *
 * @module
 */

import { makeTlsFiles } from "../scripts/tls_files.ts";

const CONFIG = new URL("../deploy/nginx.conf", import.meta.url);

/** A running nginx in front of one upstream. */
export interface Proxy extends AsyncDisposable {
  /** `https://127.0.0.1:PORT` */
  url: string;
}

/** Whether nginx and openssl are installed; the proxy rows are skipped without them. */
export async function proxyAvailable(): Promise<boolean> {
  const probe = await new Deno.Command("sh", {
    args: [
      "-c",
      "(command -v nginx || test -x /usr/sbin/nginx) && command -v openssl",
    ],
    stdout: "null",
    stderr: "null",
  }).output();
  return probe.code === 0;
}

/**
 * Starts nginx in `folder`, listening on 127.0.0.1:`listen` and proxying to
 * `upstream`: a Unix socket's path, as the shipped file does, or a port on
 * 127.0.0.1.
 */
export async function startProxy(
  folder: string,
  ports: { listen: number; upstream: string | number },
): Promise<Proxy> {
  await Deno.mkdir(folder, { recursive: true });
  await makeTlsFiles(folder);
  const shipped = await Deno.readTextFile(CONFIG);
  const config = shipped
    .replace(
      "server unix:/run/integration/service.sock max_conns=512;",
      typeof ports.upstream === "number"
        ? `server 127.0.0.1:${ports.upstream};`
        : `server unix:${ports.upstream} max_conns=512;`,
    )
    .replace(
      "listen 443 ssl http2;",
      `listen 127.0.0.1:${ports.listen} ssl http2;`,
    )
    .replace("/etc/integration/tls/cert.pem", `${folder}/cert.pem`)
    .replace("/etc/integration/tls/key.pem", `${folder}/key.pem`)
    .replace("/var/log/nginx/integration_error.log", `${folder}/error.log`)
    .replace("limit_conn per_address 100;", "limit_conn per_address 5000;");
  for (const moved of [`${ports.upstream}`, `${ports.listen} ssl`, folder]) {
    if (!config.includes(moved)) {
      throw new Error(`deploy/nginx.conf no longer has the line for ${moved}`);
    }
  }
  await Deno.writeTextFile(`${folder}/nginx.conf`, config);
  const nginx = new Deno.Command("nginx", {
    args: [
      "-p",
      folder,
      "-c",
      `${folder}/nginx.conf`,
      "-g",
      `daemon off; pid ${folder}/nginx.pid; user root;`,
    ],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port: ports.listen }))
        .close();
      break;
    } catch (error) {
      if (Date.now() > deadline) {
        nginx.kill("SIGKILL");
        await nginx.status;
        throw error;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    url: `https://127.0.0.1:${ports.listen}`,
    async [Symbol.asyncDispose]() {
      nginx.kill("SIGQUIT");
      await nginx.status;
    },
  };
}
