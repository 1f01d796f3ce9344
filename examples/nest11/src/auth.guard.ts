// auth.guard.ts — your authentication: here the bearer token is the account, Idem's scope.
import { Injectable, UnauthorizedException, type CanActivate, type ExecutionContext } from '@nestjs/common';
import type { Request } from 'express';

@Injectable()
export class AuthGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<Request & { account?: string }>();
    const token = /^Bearer (\w+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (token === undefined) throw new UnauthorizedException();
    req.account = token;
    return true;
  }
}
