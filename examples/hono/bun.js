// Bun: `bun bun.js` (or `export default app` and `bun app.js`, which serves it on port 3000)
import app from './app.js';

const server = Bun.serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 3000) });
console.log(`listening on http://localhost:${server.port}`);
