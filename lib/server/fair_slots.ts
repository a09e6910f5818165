/**
 * Who gives up a connection when the server is full: one of the addresses
 * holding the most connections, or one fewer (any, while none holds more
 * than 3), so that one address (or a few) cannot take every slot from the
 * others, while a client one or two connections above the rest is not
 * singled out (docs/design.md, "Connections").
 *
 * Connections are grouped by address and the groups bucketed by how many
 * connections they hold, so the heaviest count, and each count's first
 * accepted connection, is found in O(1) however many connections and
 * addresses there are; a group is dropped with its last connection, so
 * memory follows the connections open. Which connection goes is decided by
 * accept order alone: a request or an answer buys a connection nothing,
 * because an attacker gets those at the server's own pace, and only a new
 * TCP connection costs it something.
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
  /**
   * Those of `idle` that were answered, longest quiet first: the client is
   * done with them or may reuse them, where a fresh one's head is on its way.
   */
  answered: Set<_Slot<C>>;
  /** Index in its count's heap; -1 while out. */
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
   * `#levels[n]`: the groups holding n connections, as a binary heap by
   * their oldest connection's accept, so the first accepted of a count is
   * O(1) and an accept or a close O(log addresses); a request touches none.
   */
  #levels: _Group<C>[][] = [];
  /** The highest n with a group in `#levels[n]`; 0 when none is open. */
  #heaviest = 0;
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
        answered: new Set(),
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
        owner.answered.delete(slot);
        if (!busy) {
          owner.idle.add(slot);
          owner.answered.add(slot);
        }
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
          owner.answered.delete(slot);
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
   * full. With H the most connections any address holds: from an address
   * holding fewer than H, or when H is 1, the connection accepted first,
   * busy or idle, however many requests it made, of every address while H
   * is at most 3, else of the addresses holding H or H - 1. So a client one
   * connection above the rest is not singled out, and one of an address
   * holding one or two is closed only once `MAX_CONNECTIONS` - 1 were
   * accepted after it: no address one above it shuts the lighter, older
   * ones out. From an address holding H >= 2: only an idle connection of
   * its own, longest quiet first of those answered, else of those yet to
   * send a head, so one address filling the slots costs only itself.
   * Undefined: refuse the newcomer.
   */
  makeRoomFor(address: string): C | undefined {
    const heaviest = this.#heaviest;
    if (heaviest === 0) return undefined;
    const own = this.#groups.get(address);
    const count = own?.count ?? 0;
    if (count < heaviest || heaviest === 1) {
      // Up to 3 every count is in play, so no address one above a client of
      // one or two can shut out the older connections of lighter addresses.
      let first = this.#levels[heaviest][0].first!;
      for (let n = heaviest <= 3 ? 1 : heaviest - 1; n < heaviest; n++) {
        const next = this.#levels[n]?.[0]?.first;
        if (next && next.accepted < first.accepted) first = next;
      }
      return first.connection;
    }
    return own && (_first(own.answered) ?? _first(own.idle))?.connection;
  }

  /** The heaviest address's longest-quiet idle connection; O(heaviest count): for rare events only. */
  idlest(): C | undefined {
    for (let count = this.#heaviest; count > 0; count--) {
      const group = _first(this.#idleByCount[count]);
      if (group) return _first(group.idle)!.connection;
    }
    return undefined;
  }

  /** Applies `change` to `group` and puts the group back in its places. */
  #change(group: _Group<C>, change: () => void): void {
    this.#idleByCount[group.count]?.delete(group);
    if (group.at >= 0) _remove(this.#levels[group.count], group);
    change();
    const count = group.count;
    // A count moves by one, so an emptied top level leaves this group's
    // count the heaviest.
    if (
      count > this.#heaviest || !(this.#levels[this.#heaviest]?.length > 0)
    ) this.#heaviest = count;
    if (count === 0) {
      this.#groups.delete(group.key);
      return;
    }
    if (group.idle.size > 0) {
      (this.#idleByCount[count] ??= new Set()).add(group);
    }
    const heap = this.#levels[count] ??= [];
    group.at = heap.length;
    heap.push(group);
    _siftUp(heap, group.at);
  }
}

function _remove<C>(heap: _Group<C>[], group: _Group<C>): void {
  const at = group.at;
  group.at = -1;
  const last = heap.pop()!;
  if (last === group) return;
  heap[at] = last;
  last.at = at;
  _siftDown(heap, _siftUp(heap, at));
}

/** `a`'s oldest connection was accepted before `b`'s. */
function _before<C>(a: _Group<C>, b: _Group<C>): boolean {
  return a.first!.accepted < b.first!.accepted;
}

function _swap<C>(heap: _Group<C>[], i: number, j: number): void {
  [heap[i], heap[j]] = [heap[j], heap[i]];
  heap[i].at = i;
  heap[j].at = j;
}

function _siftUp<C>(heap: _Group<C>[], at: number): number {
  while (at > 0) {
    const parent = (at - 1) >> 1;
    if (!_before(heap[at], heap[parent])) break;
    _swap(heap, at, parent);
    at = parent;
  }
  return at;
}

function _siftDown<C>(heap: _Group<C>[], at: number): void {
  for (;;) {
    const left = 2 * at + 1;
    let best = at;
    if (left < heap.length && _before(heap[left], heap[best])) best = left;
    if (left + 1 < heap.length && _before(heap[left + 1], heap[best])) {
      best = left + 1;
    }
    if (best === at) return;
    _swap(heap, at, best);
    at = best;
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
