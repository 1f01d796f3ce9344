// charges.controller.ts
import { BadRequestException, Body, Controller, Get, Post, Req, UseGuards } from '@nestjs/common';
import type { Request } from 'express';
import type { HandlerContext } from 'idem/http';
import { Idempotent, IdempotencyContext } from 'idem/nest';
import { AuthGuard } from './auth.guard';
import { Ledger } from './ledger';

interface CreateCharge {
  readonly amount: number;
  readonly currency: string;
}
type Authenticated = Request & { account: string }; // by AuthGuard

@Controller('v1/charges')
@UseGuards(AuthGuard) // guards run before interceptors: no claim without an account
export class ChargesController {
  constructor(private readonly ledger: Ledger) {}

  @Post()
  @Idempotent({ required: true })
  create(@Req() req: Authenticated, @Body() body: CreateCharge, @IdempotencyContext() idem: HandlerContext<never>) {
    if (!Number.isInteger(body.amount) || body.amount <= 0) throw new BadRequestException('amount: a positive integer');
    // idem.id is stable across retries: pass it on to the payment processor as its own idempotency key.
    const charge = { id: `ch_${idem.id}`, amount: body.amount, currency: body.currency };
    this.ledger.record({ ...charge, account: req.account });
    return charge; // 201, recorded before it is sent; a retry gets these bytes again
  }

  @Get()
  count(@Req() req: Authenticated) {
    return { count: this.ledger.count(req.account) };
  }
}
