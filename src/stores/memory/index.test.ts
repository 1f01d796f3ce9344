import { describeStoreConformance } from 'idem/testing';
import { memoryStore } from './index.js';

describeStoreConformance({ name: 'memory', create: async () => memoryStore() });
