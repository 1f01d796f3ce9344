/**
 * examples/nest11: NestJS 11, CommonJS under the tsconfig of `nest new` 11.1, on SQLite; installed from the packed
 * tarball, compiled, driven to a replay (nest.ts). test/runtimes/nest.test.ts checks the 11.0 template too.
 */
import { describeNestExample } from './nest.js';

describeNestExample({ name: 'nest11', majors: [11, 5], entry: 'dist/main.js' });
