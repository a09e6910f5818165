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
  await Deno.writeTextFile(
    `${folder}/leaf.ext`,
    "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
  );
  const at = (file: string) => `${folder}/${file}`;
  /** A new P-256 key, unencrypted, written to `file`, for `openssl req`. */
  const newKey = (file: string) => [
    ...["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
    ...["-nodes", "-keyout", at(file)],
  ];
  const signedByCa = ["-CA", at("ca.pem"), "-CAkey", at("ca.key")];
  const commands = [
    // A throwaway CA,
    ["req", "-x509", ...newKey("ca.key"), "-subj", "/CN=test CA"]
      .concat(["-days", "1", "-out", at("ca.pem")]),
    // a request for localhost,
    ["req", ...newKey("key.pem"), "-subj", "/CN=localhost", "-out"]
      .concat([at("leaf.csr")]),
    // and the certificate the CA signs for it.
    ["x509", "-req", "-in", at("leaf.csr"), "-days", "1", ...signedByCa]
      .concat(["-CAcreateserial", "-extfile", at("leaf.ext")])
      .concat(["-out", at("cert.pem")]),
  ];
  for (const args of commands) {
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
