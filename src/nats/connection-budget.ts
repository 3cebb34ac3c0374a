/**
 * The byte budget of the instances that share a connection. The server's slow-consumer
 * limit (`max_pending`, 64 MiB by default) is per connection, not per consumer: four
 * instances on one connection, each holding and asking for its own 16 MiB, reach it
 * together. So each instance's `maxBufferedBytes` is divided by the number of instances
 * on its connection, and the instances on one connection together hold and ask for at
 * most the largest of their budgets. Pure bookkeeping: no NATS import (a connection is
 * any object).
 */

const instancesByConnection = new WeakMap<object, Set<object>>();

/** An instance's place in its connection's budget. */
export interface ConnectionBudget {
  /** The instance's part of `budget` now: `budget` over the number of instances on the connection (at least 1). */
  shareOf(budget: number): number;
  /** The instance leaves the connection (idempotent): the others' parts grow. */
  leave(): void;
}

/** The part of `budget` of one of `instances` instances (at least 1 byte). */
export function budgetShare(budget: number, instances: number): number {
  return Math.max(1, Math.floor(budget / Math.max(1, instances)));
}

/**
 * Counts `instance` among the instances of `connection` until it leaves.
 *
 * @param connection - the connection the instance pulls on
 * @param instance - the instance (one entry per object, however often it joins)
 */
export function joinConnectionBudget(connection: object, instance: object): ConnectionBudget {
  let instances = instancesByConnection.get(connection);
  if (!instances) instancesByConnection.set(connection, (instances = new Set()));
  instances.add(instance);
  const members = instances;
  return {
    shareOf: (budget) => budgetShare(budget, members.size),
    leave: () => void members.delete(instance),
  };
}
