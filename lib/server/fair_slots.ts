/**
 * Who gives up a connection when the server is full: the client address
 * holding the most connections, so that one address (or a few) cannot take
 * every slot from the others (docs/design.md, "Connections").
 *
 * Connections are grouped by address and the groups bucketed by how many
 * connections they hold, so the heaviest address is found in O(1) however
 * many connections and addresses there are; a group is dropped with its
 * last connection, so memory follows the connections open.
 *
 * @module
 */

import { lockoutKey, normalize } from "../net/client_address.ts";

/** One connection's place in {@linkcode FairSlots}. */
export interface Slot<C> {
  readonly connection: C;
  /** The connection has a request in progress (true) or none (false). */
  busy(busy: boolean): void;
  /** Leaves the count; again is harmless. */
  release(): void;
}

interface _Group<C> {
  key: string;
  /** Oldest first. */
  slots: Set<_Slot<C>>;
  /** Longest quiet first. */
  idle: Set<_Slot<C>>;
}

interface _Slot<C> extends Slot<C> {
  group: _Group<C>;
}

/** The peer connections count under; IPv6 by its /64, one host's usual share, as lock-out does. */
export function slotAddress(hostname: string): string {
  return lockoutKey(normalize(hostname));
}

/** Open connections by client address, and the policy that picks whom to close. */
export class FairSlots<C> {
  #groups = new Map<string, _Group<C>>();
  /** `#byCount[n]`: the groups holding n connections, longest there first. */
  #byCount: Set<_Group<C>>[] = [];
  /** `#idleByCount[n]`: those of them with an idle connection. */
  #idleByCount: Set<_Group<C>>[] = [];
  #heaviest = 0;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  /** Counts a new connection, idle, under `address` (a {@linkcode slotAddress}). */
  add(address: string, connection: C): Slot<C> {
    let group = this.#groups.get(address);
    if (group) this.#unplace(group);
    else {
      group = { key: address, slots: new Set(), idle: new Set() };
      this.#groups.set(address, group);
    }
    const slot: _Slot<C> = {
      connection,
      group,
      busy: (busy) => {
        if (!group.slots.has(slot)) return;
        const idleBefore = group.idle.size > 0;
        // Re-added when quiet, so the idle set stays longest-quiet first.
        group.idle.delete(slot);
        if (!busy) group.idle.add(slot);
        if (idleBefore !== group.idle.size > 0) {
          const idle = this.#idleByCount[group.slots.size] ??= new Set();
          if (idleBefore) idle.delete(group);
          else idle.add(group);
        }
      },
      release: () => {
        if (!group.slots.has(slot)) return;
        this.#unplace(group);
        group.slots.delete(slot);
        group.idle.delete(slot);
        this.#size--;
        this.#place(group);
      },
    };
    group.slots.add(slot);
    group.idle.add(slot);
    this.#size++;
    this.#place(group);
    return slot;
  }

  /**
   * Whom to close so that a newcomer from `address` fits when the server is
   * full: from a lighter address, the longest-quiet idle connection of a
   * heaviest address, else the oldest connection of one; from a heaviest
   * address, only an idle connection of its own. Undefined: refuse the
   * newcomer.
   */
  makeRoomFor(address: string): C | undefined {
    const own = this.#groups.get(address);
    const heaviest = this.#heaviest;
    if ((own?.slots.size ?? 0) < heaviest) {
      const idle = _first(this.#idleByCount[heaviest]);
      if (idle) return _first(idle.idle)!.connection;
      return _first(_first(this.#byCount[heaviest])!.slots)!.connection;
    }
    return own && _first(own.idle)?.connection;
  }

  /** The heaviest address's longest-quiet idle connection; O(heaviest count): for rare events only. */
  idlest(): C | undefined {
    for (let count = this.#heaviest; count > 0; count--) {
      const group = _first(this.#idleByCount[count]);
      if (group) return _first(group.idle)!.connection;
    }
    return undefined;
  }

  #unplace(group: _Group<C>): void {
    this.#byCount[group.slots.size]?.delete(group);
    this.#idleByCount[group.slots.size]?.delete(group);
  }

  #place(group: _Group<C>): void {
    const count = group.slots.size;
    if (count === 0) this.#groups.delete(group.key);
    else {
      (this.#byCount[count] ??= new Set()).add(group);
      if (group.idle.size > 0) {
        (this.#idleByCount[count] ??= new Set()).add(group);
      }
    }
    if (count > this.#heaviest) this.#heaviest = count;
    // Counts move by one, so the bucket below is never empty but at 0.
    else if (this.#byCount[this.#heaviest]?.size === 0) this.#heaviest--;
  }
}

function _first<T>(set: Set<T> | undefined): T | undefined {
  if (set === undefined) return undefined;
  for (const item of set) return item;
  return undefined;
}
