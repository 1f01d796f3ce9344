/**
 * One store's table, as the store's operations reach it: every command goes through `via` (counted, reported to
 * `onRoundTrip`), conditional writes tell "applied" from "refused, and by what", and the expression helpers fill in
 * the configured attribute names. Internal: the store holds one privately.
 */
import { ConditionalCheckFailedException, GetItemCommand } from '@aws-sdk/client-dynamodb';
import type { DeleteItemCommand, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import type { IdempotencyRecord, WriteResult } from '../contract.js';
import type { RoundTripMeter } from '../shared/round-trips.js';
import { decodeItem, str, type Field, type Item } from './codec.js';
import type { DynamoDBAttributeNames, DynamoDBClientLike } from './dynamodb-options.js';

const PREFIX = 'IDEMPOTENCY#';

export class DynamoTable {
  constructor(
    readonly client: DynamoDBClientLike,
    readonly table: string,
    readonly names: DynamoDBAttributeNames,
    readonly sortKey: { readonly name: string; readonly value: string } | undefined,
    readonly listIndex: string,
    /** Counts and reports every command; its closed guard is `open()`. */
    readonly meter: RoundTripMeter,
  ) {}

  open(): void {
    this.meter.open();
  }

  /**
   * The client's `send`, counted and reported as part of the store operation `op`: every request to DynamoDB goes
   * through here.
   */
  via(op: string): DynamoDBClientLike['send'] {
    // One function for every overload: each command's output is the client's own, passed through unchanged.
    const send = async (command: never): Promise<unknown> => {
      this.meter.add();
      if (!this.meter.onRoundTrip) return this.client.send(command);
      const request = { command: commandName(command), input: (command as { input: unknown }).input };
      return this.meter.observe(op, request, this.client.send(command));
    };
    return send as DynamoDBClientLike['send'];
  }

  /**
   * Sends a conditional write. Resolves undefined when it was applied; when the condition failed, the item in the
   * way: the one DynamoDB returned with the failure (`ALL_OLD`), or — from an engine that ignores `ALL_OLD`, or
   * when there is no item — one read with a consistent GetItem, a round trip of its own. null: no item.
   */
  async conditionalWrite(
    command: PutItemCommand | UpdateItemCommand | DeleteItemCommand,
    op: string,
    pk: string,
  ): Promise<IdempotencyRecord | null | undefined> {
    try {
      await this.via(op)(command as PutItemCommand);
      return undefined;
    } catch (error) {
      if (!(error instanceof ConditionalCheckFailedException)) throw error;
      return error.Item ? decodeItem(this.names, error.Item) : this.read(op, pk);
    }
  }

  /**
   * A write conditional on holding the token: refused is `{ ok: false }`, not an error — unless `ownAttempt` says
   * the item in the way (null: none) is what this very write leaves behind, i.e. an SDK resend of a write whose
   * first attempt was applied and whose reply was lost (see the comment in claim.ts): then `{ ok: true }`. Without
   * `ownAttempt` a refusal is final and costs no read.
   */
  async heldWrite(
    command: UpdateItemCommand | DeleteItemCommand,
    op: string,
    pk: string,
    ownAttempt?: (item: IdempotencyRecord | null) => boolean,
  ): Promise<WriteResult> {
    if (ownAttempt === undefined) {
      try {
        await this.via(op)(command);
        return { ok: true };
      } catch (error) {
        if (error instanceof ConditionalCheckFailedException) return { ok: false };
        throw error;
      }
    }
    const refused = await this.conditionalWrite(command, op, pk);
    return { ok: refused === undefined || ownAttempt(refused) };
  }

  async read(op: string, pk: string): Promise<IdempotencyRecord | null> {
    const { Item } = await this.via(op)(
      new GetItemCommand({ TableName: this.table, Key: this.key(pk), ConsistentRead: true }),
    );
    return Item ? decodeItem(this.names, Item) : null;
  }

  key(pk: string): Item {
    const key: Item = { [this.names.pk]: str(pk) };
    if (this.sortKey) key[this.sortKey.name] = str(this.sortKey.value);
    return key;
  }

  /** Filters idempotency items out of a shared (single-table) table. */
  ours(): string {
    return `begins_with(#pk, :prefix)${this.sortKey ? ' AND #sk = :sk' : ''}`;
  }

  oursValues(): Item {
    return { ':prefix': str(PREFIX), ...(this.sortKey ? { ':sk': str(this.sortKey.value) } : {}) };
  }

  /** `ExpressionAttributeNames` for exactly the `#field` placeholders the expressions use (DynamoDB rejects extras). */
  placeholders(...expressions: string[]): Record<string, string> {
    const placeholders: Record<string, string> = {};
    for (const expression of expressions) {
      for (const [placeholder, field] of expression.matchAll(/#(\w+)/g)) {
        const name = field === 'sk' ? this.sortKey?.name : this.names[field as Field];
        if (name === undefined) throw new Error(`unknown placeholder ${placeholder}`);
        placeholders[placeholder] = name;
      }
    }
    return placeholders;
  }

  /** A condition and the names and values it (and any `alsoUses` expression, e.g. the update) refers to. */
  condition(condition: string, values: Item, ...alsoUses: string[]) {
    return {
      ConditionExpression: condition,
      ExpressionAttributeNames: this.placeholders(condition, ...alsoUses),
      ExpressionAttributeValues: values,
    };
  }

  filter(filter: string, values: Item, ...alsoUses: string[]) {
    return {
      FilterExpression: filter,
      ExpressionAttributeNames: this.placeholders(filter, ...alsoUses),
      ExpressionAttributeValues: values,
    };
  }
}

/** `PutItemCommand` → `PutItem`: the operation's name in DynamoDB's own API. */
function commandName(command: object): string {
  return command.constructor.name.replace(/Command$/, '');
}
