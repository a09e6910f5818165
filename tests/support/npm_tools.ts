/**
 * Tools from the npm registry that the contract tests run against the real
 * service (Stoplight Prism, openapi-typescript, openapi-fetch, TypeScript),
 * at pinned versions, installed by `deno install` into a throwaway folder:
 * the project's deno.json and lockfile stay free of them, and each tool runs
 * as a `deno run` child with only the permissions it is given.
 *
 * Without the registry, a test that needs them shows as ignored with the
 * reason on stderr, as tests/e2e/tls_proxy_test.ts does without nginx; under CI
 * (`CI` set) it runs and fails instead, so that CI never passes without them.
 *
 * @module
 */

/**
 * `deno run` of a tool that reads files and works offline: the network
 * denied proves that nothing is fetched. The tool and its arguments follow.
 */
export const OFFLINE_RUN: readonly string[] = [
  "run",
  "-q",
  "--allow-read",
  "--allow-env",
  "--allow-sys",
  "--deny-net",
];

/** The pinned versions, by package. */
export const NPM_VERSIONS = {
  "@stoplight/prism-cli": "5.16.0",
  "openapi-typescript": "7.13.0",
  "openapi-fetch": "0.17.0",
  "typescript": "5.9.3",
} as const;

/** A package of {@linkcode NPM_VERSIONS}. */
export type NpmPackage = keyof typeof NPM_VERSIONS;

/** True under CI, where a tool that cannot be installed fails the test. */
export const IN_CI: boolean = !["", "0", "false"].includes(
  (Deno.env.get("CI") ?? "").toLowerCase(),
);

/** Installed tools, or why they are not. */
export type NpmTools =
  | {
    ok: true;
    /** The folder with package.json and node_modules: run tools from here. */
    folder: string;
    /** The absolute path of a package's command, from its package.json `bin`. */
    bin(name: NpmPackage, command?: string): string;
  }
  | { ok: false; reason: string };

// A cold download of Prism's dependencies takes a while on a slow link.
const INSTALL_TIMEOUT_MS = 180_000;

/**
 * Installs `packages` at their pinned versions into a fresh folder, removed
 * when the test module unloads. Never throws: a failure is returned.
 */
export async function installNpmTools(
  packages: readonly NpmPackage[],
): Promise<NpmTools> {
  const folder = await Deno.makeTempDir({ prefix: "isk_npm_tools_" });
  addEventListener("unload", () => {
    try {
      Deno.removeSync(folder, { recursive: true });
    } catch {
      // already gone
    }
  });
  const dependencies = Object.fromEntries(
    packages.map((name) => [name, NPM_VERSIONS[name]]),
  );
  await Deno.writeTextFile(
    `${folder}/package.json`,
    JSON.stringify({ private: true, dependencies }),
  );
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command(Deno.execPath(), {
      args: ["install", "--quiet"],
      cwd: folder,
      env: { NO_COLOR: "1", SCARF_ANALYTICS: "false" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: AbortSignal.timeout(INSTALL_TIMEOUT_MS),
    }).output();
  } catch (error) {
    return {
      ok: false,
      reason: `deno install of ${Object.keys(dependencies)} did not finish: ${
        error instanceof Error ? error.name : String(error)
      }`,
    };
  }
  if (!out.success) {
    const stderr = new TextDecoder().decode(out.stderr).trim();
    return {
      ok: false,
      reason: `deno install of ${
        Object.keys(dependencies)
      } failed (exit ${out.code}): ${stderr.slice(-2000)}`,
    };
  }
  return {
    ok: true,
    folder,
    bin(name, command) {
      const manifest = JSON.parse(
        Deno.readTextFileSync(`${folder}/node_modules/${name}/package.json`),
      ) as { bin?: string | Record<string, string> };
      const bin = typeof manifest.bin === "string"
        ? manifest.bin
        : manifest.bin?.[command ?? Object.keys(manifest.bin ?? {})[0]];
      if (bin === undefined) {
        throw new Error(`${name} has no command ${command ?? ""}`);
      }
      return Deno.realPathSync(`${folder}/node_modules/${name}/${bin}`);
    },
  };
}

/**
 * Whether a test needing `tools` is registered as ignored: only outside CI,
 * and then it says why on stderr.
 */
export function ignoredWithout(tools: NpmTools, file: string): boolean {
  if (tools.ok || IN_CI) return false;
  console.error(
    `${file} skipped: the npm tools it runs could not be installed (${tools.reason}); under CI (CI=true) it fails instead`,
  );
  return true;
}

/** The tools of an installation that must have succeeded: throws the reason otherwise. */
export function required(
  tools: NpmTools,
): Extract<NpmTools, { ok: true }> {
  if (!tools.ok) throw new Error(tools.reason);
  return tools;
}

/** Any API key in `text` replaced by `[key]`: tool output is printed only so. */
export function withoutKeys(text: string): string {
  return text.replace(/isk_[0-9A-Za-z]{36}/g, "[key]");
}
