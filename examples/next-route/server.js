// server.js — `npm start`: Next.js's request handler on node:http, after `npm run build`. DATABASE_URL is read
// here, at start (the build does not need it): without it the server exits with one line instead of serving 500s.
import { createServer } from 'node:http';

if (!process.env.DATABASE_URL) {
  console.error('next-route: DATABASE_URL is not set (export DATABASE_URL=postgres://… before npm start)');
  process.exit(1);
}
const { default: next } = await import('next');
const port = Number(process.env.PORT ?? 3000);
const hostname = process.env.HOSTNAME ?? 'localhost';
const app = next({ dev: false, dir: import.meta.dirname, hostname, port });
await app.prepare();
const handle = app.getRequestHandler();
createServer((request, response) => handle(request, response)).listen(port, hostname, () =>
  console.log(`listening on http://${hostname}:${port}`),
);
