/**
 * The lease tests that wait out a whole lease by design, on Deno KV: apart
 * from tests/contract/kv_store_test.ts so that `deno task test:quick` runs
 * only tests that wait on nothing; `deno task test` runs these too.
 */

import { leaseContract } from "../support/lease_contract.ts";
import { sharedKvFile } from "../support/kv_shared.ts";

leaseContract("kv store", sharedKvFile, "waits");
