/** The SQLite store against the shared conformance suite, each case on a database file of its own. */
import { describeStoreConformance } from 'idem/testing';
import { freshStore } from '#test/fixtures/sqlite.js';

describeStoreConformance({ name: 'sqlite', create: () => freshStore() });
