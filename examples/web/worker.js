// Cloudflare Workers: `npx wrangler dev` (wrangler.toml names this file). Each isolate has its own memory store:
// on Workers, keep the records in Durable Objects, which every isolate reaches (idem/durable-objects,
// docs/DURABLE-OBJECTS.md).
// #region worker
import { handle } from './charges.js';

export default { fetch: handle };
// #endregion worker
