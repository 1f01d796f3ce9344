/**
 * examples/nest12: NestJS 12, ES modules under the tsconfig of `nest new` 12 with TypeScript 6, on SQLite;
 * installed from the packed tarball, compiled, driven to a replay (nest.ts).
 */
import { describeNestExample } from './nest.js';

describeNestExample({ name: 'nest12', majors: [12, 6], entry: 'dist/src/main.js' });
