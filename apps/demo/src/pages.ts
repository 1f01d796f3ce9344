/**
 * @module Serves the lab and model pages: the static files `npm run build` writes to `apps/demo/dist/public` (Vite).
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Where the built pages are, whether this module runs from `src/` (tsx) or from `dist/` (compiled). */
export function publicDir(): string {
  const candidates = [
    fileURLToPath(new URL('./public/', import.meta.url)),
    fileURLToPath(new URL('../dist/public/', import.meta.url)),
  ];
  return candidates.find((dir) => existsSync(join(dir, 'index.html'))) ?? (candidates[1] as string);
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
  '.map': 'application/json',
};

/** Same origin only; no inline script; the pages talk to this server and nothing else. */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

const PAGES: Record<string, string> = {
  '/': 'index.html',
  '/index.html': 'index.html',
  '/model': 'model.html',
  '/model.html': 'model.html',
};

/**
 * A `pages(request)` function for `createApp`: `/` (the lab), `/model` (the model page) and the hashed files under
 * `/assets/`. Anything else is `undefined` (the app answers 404). HTML is never cached; hashed assets are immutable.
 *
 * @example
 * const app = createApp({ ...config, ...backend, pages: staticPages() })
 */
export function staticPages(dir: string = publicDir()): (request: Request) => Promise<Response | undefined> {
  return async (request) => {
    if (request.method !== 'GET' && request.method !== 'HEAD') return undefined;
    const { pathname } = new URL(request.url);
    const page = PAGES[pathname];
    const asset = /^\/assets\/([A-Za-z0-9][A-Za-z0-9._-]*)$/.exec(pathname)?.[1];
    const file = page ?? (asset && !asset.includes('..') ? `assets/${asset}` : undefined);
    if (!file) return undefined;
    let body: Buffer;
    try {
      body = await readFile(join(dir, file));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      if (!page) return undefined;
      return new Response(
        `The pages are not built. Run \`npm run build\` (npm start does), then reload.\n(looked in ${dir})\n`,
        {
          status: 503,
          headers: { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' },
        },
      );
    }
    const extension = /\.[a-z0-9]+$/.exec(file)?.[0] ?? '';
    return new Response(request.method === 'HEAD' ? null : new Uint8Array(body), {
      headers: {
        'content-type': TYPES[extension] ?? 'application/octet-stream',
        'cache-control': page ? 'no-cache' : 'public, max-age=31536000, immutable',
        ...SECURITY_HEADERS,
      },
    });
  };
}
