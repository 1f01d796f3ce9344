// charges.controller.ts
import { Body, Controller, Post } from '@nestjs/common';
import type { HandlerContext } from 'idem/http';
import { Idempotent, IdempotencyContext } from 'idem/nest';

interface CreateCharge {
  readonly amount: number;
  readonly currency: string;
}

@Controller('v1')
export class ChargesController {
  @Post('charges')
  @Idempotent({ required: true })
  create(@Body() body: CreateCharge, @IdempotencyContext() idem: HandlerContext<never>) {
    // idem.id is stable across retries: pass it on to the payment processor as its own idempotency key.
    return { id: `ch_${idem.id}`, amount: body.amount, currency: body.currency };
  }
}
