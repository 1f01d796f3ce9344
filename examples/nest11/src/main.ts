// #region main
// main.ts — NestJS 11 (CommonJS): no top-level await, so the app starts in a function.
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module';

async function bootstrap() {
  const app = await NestFactory.create(AppModule, { rawBody: true }); // rawBody is required: see below
  await app.listen(process.env.PORT ?? 3000);
  console.log(`listening on ${await app.getUrl()}`);
}
void bootstrap();
// #endregion main
