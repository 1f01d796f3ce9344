// Deno 2: `deno run --allow-net --allow-env deno.js` (idem comes from node_modules: run `npm install` first)
// #region deno
import { handle } from './charges.js';

Deno.serve(
  {
    port: Number(Deno.env.get('PORT') ?? 3000),
    onListen: ({ port }) => console.log(`listening on http://localhost:${port}`),
  },
  handle,
);
// #endregion deno
