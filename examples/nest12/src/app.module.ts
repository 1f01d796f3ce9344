// #region module
// app.module.ts — NestJS 12 (ESM)
import { Module } from '@nestjs/common';
import type { Request } from 'express';
import { IdempotencyModule } from 'idem/nest';
import { sqliteStore } from 'idem/stores/sqlite';
import { ChargesController } from './charges.controller.js';
import { Ledger } from './ledger.js';

@Module({ providers: [Ledger], exports: [Ledger] })
export class LedgerModule {}

@Module({
  imports: [
    LedgerModule,
    IdempotencyModule.forRootAsync({
      imports: [LedgerModule],
      inject: [Ledger], // the store comes from your own provider: here, the ledger's SQLite file
      useFactory: async (ledger: Ledger) => {
        const store = sqliteStore({ database: ledger.database });
        await store.migrate();
        return {
          store,
          scope: (req: Request & { account?: string }) => req.account!, // set by AuthGuard
          classify: (status: number) => (status === 400 ? 'release' : undefined), // a refused body is not saved
        };
      },
    }),
  ],
  controllers: [ChargesController],
})
export class AppModule {}
// #endregion module
