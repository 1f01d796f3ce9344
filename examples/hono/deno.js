// Deno 2: `deno run --allow-net --allow-env deno.js` (hono and idem come from node_modules: `npm install` first)
import app from './app.js';

Deno.serve(
  {
    port: Number(Deno.env.get('PORT') ?? 3000),
    onListen: ({ port }) => console.log(`listening on http://localhost:${port}`),
  },
  app.fetch,
);
