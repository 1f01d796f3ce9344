import { describe, expect, it } from 'vitest';
import { memoryStore } from '../stores/memory/index.js';
import { idempotency } from './middleware.js';

/** A framework's own request class, as Next.js's `NextRequest` is: extra fields and methods on a Web `Request`. */
class FrameworkRequest extends Request {
  readonly account: string;
  constructor(input: string, init: RequestInit & { account: string }) {
    super(input, init);
    this.account = init.account;
  }
  greeting(): string {
    return `hello ${this.account}`;
  }
}

describe('a Request subclass keeps its class on keyed requests', () => {
  it('reaches the handler as itself, fields and methods intact, with its body unread and readable', async () => {
    const seen: Array<{
      sameObject: boolean;
      isSubclass: boolean;
      account: string;
      greeting: string;
      bodyUsed: boolean;
      body: unknown;
    }> = [];
    const original = new FrameworkRequest('http://x/v1/charges', {
      method: 'POST',
      headers: { 'idempotency-key': 'k1', 'content-type': 'application/json' },
      body: '{"amount":500}',
      account: 'acct_a',
    });
    const handle = idempotency({ store: memoryStore(), scope: 'single-tenant' })(async (request) => {
      const bodyUsed = request.bodyUsed;
      const typed = request as FrameworkRequest;
      seen.push({
        sameObject: request === original,
        isSubclass: request instanceof FrameworkRequest,
        account: typed.account,
        greeting: typed.greeting(),
        bodyUsed,
        body: await request.json(),
      });
      return Response.json({ ok: true }, { status: 201 });
    });
    const response = await handle(original);
    expect(response.status).toBe(201);
    expect(seen).toEqual([
      {
        sameObject: true,
        isSubclass: true,
        account: 'acct_a',
        greeting: 'hello acct_a',
        bodyUsed: false,
        body: { amount: 500 },
      },
    ]);
  });
});
