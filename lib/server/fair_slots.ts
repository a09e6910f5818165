/**
 * Who gives up a connection when the server is full: the client address
 * holding the most connections, so that one address (or a few) cannot take
 * every slot from the others (docs/design.md, "Connections").
 *
 * Connections are grouped by address and the groups bucketed by how many
 * connections they hold, so the heaviest address is found in O(1) however
 * many connections and addresses there are; a group is dropped with its
 * last connection, so memory follows the connections open. Which of those
 * addresses' connections goes is decided by accept order alone: a request
 * or an answer buys a connection nothing, because an attacker gets those at
 * the server's own pace, and only a new TCP connection costs it something.
 *
 * @module
 */

import { lockoutKey, normalize } from "../net/client_address.ts";

/** One connection's place in {@linkcode FairSlots}. */
export interface Slot<C> {
  readonly connection: C;
  /**
   * A request arrived (true), or an answer left and none is in progress
   * (false); with HTTP/2, any stream's. Only whether it is idle, and since
   * when, follows: never its place in the cut order.
   */
  busy(busy: boolean): void;
  /** Leaves the count; again is harmless. */
  release(): void;
}

interface _Group<C> {
  key: string;
  count: number;
  /** Its connections, oldest accept first; appended at accept, never moved. */
  first?: _Slot<C>;
  last?: _Slot<C>;
  /** Longest quiet first. */
  idle: Set<_Slot<C>>;
  /** Index in the heap; -1 once out. */
  at: number;
}

interface _Slot<C> extends Slot<C> {
  group: _Group<C>;
  /** When it was accepted, in steps of the one counter. */
  accepted: number;
  open: boolean;
  prev?: _Slot<C>;
  next?: _Slot<C>;
}

/** The peer connections count under; IPv6 by its /64, one host's usual share, as lock-out does. */
export function slotAddress(hostname: string): string {
  return lockoutKey(normalize(hostname));
}

/** Open connections by client address, and the policy that picks whom to close. */
export class FairSlots<C> {
  #groups = new Map<string, _Group<C>>();
  /**
   * Every group, the heaviest first and, among those, the one whose oldest
   * connection was accepted first: a binary heap, so the pick is O(1) and
   * an accept or a close O(log addresses); a request touches it never.
   */
  #heap: _Group<C>[] = [];
  /** `#idleByCount[n]`: the groups holding n connections with an idle one. */
  #idleByCount: Set<_Group<C>>[] = [];
  /** Orders accepts; a counter, not a clock, so no two tie. */
  #clock = 0;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  /** Counts a new connection, idle, under `address` (a {@linkcode slotAddress}), as the newest accepted. */
  add(address: string, connection: C): Slot<C> {
    let group = this.#groups.get(address);
    if (!group) {
      group = {
        key: address,
        count: 0,
        idle: new Set(),
        at: -1,
      };
      this.#groups.set(address, group);
    }
    const owner = group;
    const slot: _Slot<C> = {
      connection,
      group: owner,
      accepted: ++this.#clock,
      open: true,
      busy: (busy) => {
        if (!slot.open) return;
        // Re-added, so the set stays longest quiet first.
        const idleBefore = owner.idle.size > 0;
        owner.idle.delete(slot);
        if (!busy) owner.idle.add(slot);
        if (idleBefore !== owner.idle.size > 0) {
          const idle = this.#idleByCount[owner.count] ??= new Set();
          if (idleBefore) idle.delete(owner);
          else idle.add(owner);
        }
      },
      release: () => {
        if (!slot.open) return;
        slot.open = false;
        this.#change(owner, () => {
          _unlink(owner, slot);
          owner.count--;
          owner.idle.delete(slot);
          this.#size--;
        });
      },
    };
    this.#change(owner, () => {
      _append(owner, slot);
      owner.count++;
      owner.idle.add(slot);
      this.#size++;
    });
    return slot;
  }

  /**
   * Whom to close so that a newcomer from `address` fits when the server is
   * full. From a lighter address: of the heaviest addresses' connections,
   * the one accepted first, busy or idle, however many requests it made;
   * so a connection is closed only once every other connection of those
   * addresses was accepted after it, `MAX_CONNECTIONS` - 1 new connections
   * within its life when each address holds one. From a heaviest address:
   * only an idle connection of its own, longest quiet first. Undefined:
   * refuse the newcomer.
   */
  makeRoomFor(address: string): C | undefined {
    const top = this.#heap[0];
    if (top === undefined) return undefined;
    const own = this.#groups.get(address);
    if ((own?.count ?? 0) < top.count) {
      return top.first!.connection;
    }
    return own && _first(own.idle)?.connection;
  }

  /** The heaviest address's longest-quiet idle connection; O(heaviest count): for rare events only. */
  idlest(): C | undefined {
    for (let count = this.#heap[0]?.count ?? 0; count > 0; count--) {
      const group = _first(this.#idleByCount[count]);
      if (group) return _first(group.idle)!.connection;
    }
    return undefined;
  }

  /** Applies `change` to `group` and puts the group back in its places. */
  #change(group: _Group<C>, change: () => void): void {
    this.#idleByCount[group.count]?.delete(group);
    change();
    const count = group.count;
    if (count === 0) {
      this.#groups.delete(group.key);
      this.#remove(group);
      return;
    }
    if (group.idle.size > 0) {
      (this.#idleByCount[count] ??= new Set()).add(group);
    }
    if (group.at < 0) {
      group.at = this.#heap.length;
      this.#heap.push(group);
    }
    this.#siftDown(this.#siftUp(group.at));
  }

  #remove(group: _Group<C>): void {
    const at = group.at;
    if (at < 0) return;
    group.at = -1;
    const last = this.#heap.pop()!;
    if (last === group) return;
    this.#heap[at] = last;
    last.at = at;
    this.#siftDown(this.#siftUp(at));
  }

  /** `a` is cut before `b`. */
  #before(a: _Group<C>, b: _Group<C>): boolean {
    return a.count !== b.count
      ? a.count > b.count
      : a.first!.accepted < b.first!.accepted;
  }

  #swap(i: number, j: number): void {
    const heap = this.#heap;
    [heap[i], heap[j]] = [heap[j], heap[i]];
    heap[i].at = i;
    heap[j].at = j;
  }

  #siftUp(at: number): number {
    while (at > 0) {
      const parent = (at - 1) >> 1;
      if (!this.#before(this.#heap[at], this.#heap[parent])) break;
      this.#swap(at, parent);
      at = parent;
    }
    return at;
  }

  #siftDown(at: number): void {
    const heap = this.#heap;
    for (;;) {
      const left = 2 * at + 1;
      let best = at;
      if (left < heap.length && this.#before(heap[left], heap[best])) {
        best = left;
      }
      if (left + 1 < heap.length && this.#before(heap[left + 1], heap[best])) {
        best = left + 1;
      }
      if (best === at) return;
      this.#swap(at, best);
      at = best;
    }
  }
}

function _unlink<C>(group: _Group<C>, slot: _Slot<C>): void {
  if (slot.prev) slot.prev.next = slot.next;
  else group.first = slot.next;
  if (slot.next) slot.next.prev = slot.prev;
  else group.last = slot.prev;
  slot.prev = slot.next = undefined;
}

function _append<C>(group: _Group<C>, slot: _Slot<C>): void {
  slot.prev = group.last;
  if (group.last) group.last.next = slot;
  else group.first = slot;
  group.last = slot;
}

function _first<T>(set: Set<T> | undefined): T | undefined {
  if (set === undefined) return undefined;
  for (const item of set) return item;
  return undefined;
}
