// Node 20.19+, 22.12+ or 24: `node node.js`
// #region node
import { serve } from '@hono/node-server';
import app from './app.js';

serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 3000) }, ({ port }) =>
  console.log(`listening on http://localhost:${port}`),
);
// #endregion node
