/**
 * The commands by name, in `keys --help` order. A new command is a file and a line here.
 *
 * @module
 */

import type { Command } from "./command.ts";
import { audit } from "./audit.ts";
import { exportCommand, importCommand } from "./backup.ts";
import { create } from "./create.ts";
import { identify } from "./identify.ts";
import { list } from "./list.ts";
import { revoke } from "./revoke.ts";
import { rotate } from "./rotate.ts";
import { show } from "./show.ts";
import { status } from "./status.ts";
import { update } from "./update.ts";
import { webhooks } from "./webhooks.ts";

export const COMMANDS: Readonly<Record<string, Command>> = {
  create,
  list,
  show,
  update,
  revoke,
  rotate,
  identify,
  audit,
  export: exportCommand,
  import: importCommand,
  status,
  webhooks,
};
