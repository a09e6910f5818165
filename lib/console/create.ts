/**
 * `keys create`: a new key for an installation, printed once.
 *
 * @module
 */

import { generateApiKey } from "../auth/api_key.ts";
import {
  normalizeEmail,
  normalizeName,
  publicRecord,
} from "../store/records.ts";
import type { KeyRecord, KeyStore } from "../store/types.ts";
import type { Command } from "./command.ts";
import {
  made,
  refuseDiscardingStdout,
  STORE_WARNING,
  writeFailure,
} from "./_delivery.ts";
import { ConsoleError, failure } from "./errors.ts";
import {
  checked,
  LIFETIME_OPTIONS,
  RATE_OPTION,
  requestedExpiry,
  requestedRate,
  required,
} from "./_input.ts";
import { jsonText, report, visible } from "./_output.ts";
import { named } from "./_records.ts";
import { inStore, NEW_KEY, storeField, warnWithoutServer } from "./_store.ts";
import { ALLOW_FROM_OPTION, allowFromOption } from "./update.ts";
import { formatRate } from "../auth/rate_limit.ts";

export const create: Command = {
  summary: "generate a key for an installation and print it once",
  usage:
    "create --name NAME --email EMAIL [--expires-in DURATION | --expires-at TIME] [--allow-from RANGES] [--rate RATE]",
  options: {
    name: {
      type: "string",
      help: "the installation's name, unique among valid keys",
    },
    email: {
      type: "string",
      help: "the integrator's registered e-mail address",
    },
    ...LIFETIME_OPTIONS,
    "allow-from": ALLOW_FROM_OPTION,
    rate: RATE_OPTION,
  },
  positionals: [0, 0],
  notes: [
    "",
    "The key is printed once, on stdout; messages go to stderr.",
    "KEY_MAX_LIFETIME, when set, bounds the lifetime and is the default one.",
    "KEY_RATE_LIMIT, when set, is the rate of a key created without --rate.",
  ],
  async run(ctx) {
    const { store, values, json, out, actor, now } = ctx;
    const name = checked(normalizeName, required(values, "name"));
    const email = checked(normalizeEmail, required(values, "email"));
    const expiresAt = requestedExpiry(values, { now });
    const allowFrom = typeof values["allow-from"] === "string"
      ? allowFromOption(values["allow-from"])
      : null;
    const rateLimit = requestedRate(values);
    refuseDiscardingStdout();
    const fresh = generateApiKey();
    const [record, interrupted] = await made(store.create({
      name,
      email,
      hash: fresh.hash,
      hint: fresh.hint,
      expiresAt,
      allowFrom,
      rateLimit,
    }, { actor }));
    // Stored first, so that a key on stdout always works; a key nobody
    // received is revoked again, which touches no other key.
    try {
      out.deliver(
        (json
          ? jsonText({
            ...publicRecord(record),
            key: fresh.key,
            ...storeField(ctx),
          })
          : fresh.key) +
          "\n",
      );
    } catch (error) {
      throw await undeliveredCreate(store, record, { error, actor });
    }
    if (interrupted !== null) throw interrupted;
    report(
      `Created key ${named(record)} for ${visible(record.email)} ${
        inStore(ctx)
      }${record.expiresAt === null ? "" : `, expiring at ${record.expiresAt}`}${
        record.rateLimit === null
          ? ""
          : `, limited to ${formatRate(record.rateLimit)}`
      }.`,
    );
    await warnWithoutServer(ctx, NEW_KEY);
    report(STORE_WARNING);
  },
};

/**
 * A create whose key could not be written: the key is revoked again, as nobody
 * has it, and the message says what the store holds now.
 */
async function undeliveredCreate(
  store: KeyStore,
  record: KeyRecord,
  options: { error: unknown; actor: string },
): Promise<ConsoleError> {
  const cause = writeFailure(options.error);
  const again =
    "run the command again with stdout to a terminal, a file or a live pipe";
  try {
    await store.revoke(record.id, {
      actor: options.actor,
      reason: "not delivered",
    });
  } catch (error) {
    return new ConsoleError(
      `Key ${record.id} was created but could not be written to stdout (${cause}), and revoking it failed (${
        failure(error)
      }); nobody has this key: revoke it with "keys revoke ${record.id} --reason 'not delivered'", then ${again}`,
      { code: "key_not_delivered" },
    );
  }
  return new ConsoleError(
    `Key ${record.id} was created but could not be written to stdout (${cause}); it has been revoked and no other key changed; ${again}`,
    { code: "key_not_delivered" },
  );
}
