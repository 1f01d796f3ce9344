// app.module.ts — NestJS 12 (ESM)
import { Module } from '@nestjs/common';
import Database from 'better-sqlite3';
import type { Request } from 'express';
import type { IdempotencyStore } from 'idem';
import { IdempotencyModule } from 'idem/nest';
import { sqliteStore } from 'idem/stores/sqlite';
import { ChargesController } from './charges.controller.js';

export const IDEM_STORE = Symbol('IDEM_STORE');

@Module({
  providers: [
    {
      provide: IDEM_STORE,
      useFactory: async () => {
        const store = sqliteStore({ database: new Database('idem.db') });
        await store.migrate();
        return store;
      },
    },
  ],
  exports: [IDEM_STORE],
})
export class StoreModule {}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      imports: [StoreModule],
      inject: [IDEM_STORE], // the store comes from your own provider
      useFactory: (store: IdempotencyStore<Database.Database>) => ({
        store,
        scope: (req: Request & { account?: string }) => req.account!, // set by your guard
        classify: (status: number) => (status === 400 ? 'release' : undefined), // ValidationPipe failures are not saved
      }),
    }),
  ],
  controllers: [ChargesController],
})
export class AppModule {}
