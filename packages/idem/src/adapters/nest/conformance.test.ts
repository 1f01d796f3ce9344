/**
 * The adapter conformance suite on NestJS 11, on both of its platforms (Express and Fastify), over real HTTP
 * against SQLite. The store reaches the module through dependency injection (`forRootAsync` with `inject`).
 * The harness (harness.test-kit.ts) also runs on NestJS 12: test/runtimes/nest.test.ts.
 */
import 'reflect-metadata';
import * as common from '@nestjs/common';
import * as core from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { describeAdapterConformance } from '../../testing/adapter.js';
import { sqliteLedger } from '../../testing/sqlite-ledger.test-kit.js';
import { nestHarness } from './harness.test-kit.js';
import * as idem from './index.js';

const ledger = sqliteLedger('nest');

for (const platform of ['express', 'fastify'] as const) {
  describeAdapterConformance({
    harness: nestHarness(platform, { version: 'NestJS 11', common, core, idem, FastifyAdapter }),
    ...ledger,
  });
}
