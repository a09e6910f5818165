/**
 * Why a PostgreSQL store could not be opened, told by the error's code (the
 * server's SQLSTATE, or the socket's), never by its text.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { openFailure } from "../../lib/store/postgres/connection.ts";
import { StoreUnavailableError } from "../../lib/store/errors.ts";

const URL_WITH_PASSWORD = "postgres://app:s3cret-pw@db.internal:6543/keys";

/** The driver's error for a server's answer with `code`. */
function serverError(code: string): Error {
  return new postgres.PostgresError(
    { code, message: "words that change between versions" } as never,
  );
}

/** The socket's error, as the driver passes it on. */
function socketError(code: string): Error {
  return Object.assign(new Error(`connect ${code} 10.0.0.1:6543`), { code });
}

Deno.test("a missing role, a wrong password, a missing database and nothing listening each get one sentence naming DATABASE_URL and the fix, never the password", () => {
  const cases: [Error, string][] = [
    [
      serverError("28000"),
      "PostgreSQL does not let user app connect (no such role, or no pg_hba.conf entry for it): create the role (createuser app), allow it in pg_hba.conf, or fix the user in DATABASE_URL",
    ],
    [
      serverError("28P01"),
      "PostgreSQL refused the password of user app: fix the password in DATABASE_URL, or set it with ALTER ROLE app PASSWORD",
    ],
    [
      serverError("3D000"),
      "PostgreSQL has no database keys: create it (createdb -O app keys) or fix the database in DATABASE_URL",
    ],
    [
      socketError("ECONNREFUSED"),
      "Nothing accepts connections at db.internal:6543, where DATABASE_URL points: start PostgreSQL there, or fix the host and port in DATABASE_URL",
    ],
  ];
  for (const [error, expected] of cases) {
    const mapped = openFailure(error, URL_WITH_PASSWORD);
    assert.ok(mapped instanceof StoreUnavailableError, expected);
    assert.equal(mapped.code, "store_unavailable");
    assert.equal(mapped.message, expected);
    assert.equal(mapped.cause, error);
    assert.ok(!mapped.message.includes("s3cret-pw"));
  }
});

Deno.test("a database named without a path is the user's, and a name with spaces is quoted", () => {
  const mapped = openFailure(
    serverError("3D000"),
    "postgres://my%20app@127.0.0.1/",
  );
  assert.ok(mapped instanceof StoreUnavailableError);
  assert.equal(
    mapped.message,
    'PostgreSQL has no database "my app": create it (createdb -O "my app" "my app") or fix the database in DATABASE_URL',
  );
});

Deno.test("an opening failure of any other code keeps the outage's general wording, and a code from the wrong source is not taken for another", () => {
  for (
    const error of [
      socketError("ETIMEDOUT"),
      serverError("57P03"),
      // A socket code from the server, or a SQLSTATE from the socket, is not one.
      serverError("ECONNREFUSED"),
      socketError("3D000"),
    ]
  ) {
    const mapped = openFailure(error, URL_WITH_PASSWORD);
    if (mapped instanceof StoreUnavailableError) {
      assert.match(mapped.message, /^The key store cannot be opened: /);
    } else assert.equal(mapped, error);
  }
});
