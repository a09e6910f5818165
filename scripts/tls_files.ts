/**
 * Throwaway TLS files made with openssl, as an operator would have them:
 * for the tests' TLS servers (tests/support/processes.ts) and the
 * benchmark's nginx (bench/proxy.ts).
 *
 * @module
 */

/**
 * A throwaway CA (`ca.pem`) and a server certificate it signs for
 * localhost and 127.0.0.1 (`cert.pem`, `key.pem`) in `folder`, made with
 * openssl as an operator would have them.
 */
export async function makeTlsFiles(folder: string): Promise<void> {
  const tls = folder;
  await Deno.writeTextFile(
    `${tls}/leaf.ext`,
    "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
  );
  // A throwaway CA and a server certificate it signs, as an operator would have.
  for (
    const args of [
      [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test CA",
        "-keyout",
        `${tls}/ca.key`,
        "-out",
        `${tls}/ca.pem`,
      ],
      [
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        `${tls}/key.pem`,
        "-out",
        `${tls}/leaf.csr`,
      ],
      [
        "x509",
        "-req",
        "-in",
        `${tls}/leaf.csr`,
        "-CA",
        `${tls}/ca.pem`,
        "-CAkey",
        `${tls}/ca.key`,
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        `${tls}/leaf.ext`,
        "-out",
        `${tls}/cert.pem`,
      ],
    ]
  ) {
    const openssl = await new Deno.Command("openssl", {
      args,
      stdout: "null",
      stderr: "piped",
    }).output();
    if (openssl.code !== 0) {
      throw new Error(
        `openssl ${args[0]} failed: ${
          new TextDecoder().decode(openssl.stderr)
        }`,
      );
    }
  }
}
