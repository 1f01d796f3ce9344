// Bun 1.2+: `bun bun.js`
// #region bun
import { handle } from './charges.js';

const server = Bun.serve({ fetch: handle, port: Number(process.env.PORT ?? 3000) });
console.log(`listening on http://localhost:${server.port}`);
// #endregion bun
