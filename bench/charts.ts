/**
 * @module The bench's charts (docs/bench/*.svg, bench/svg.ts) from one run's results and its targets, written by a
 * full run's report beside docs/BENCHMARKS.md, which links them.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Load } from './load.js';
import { STORES, frameworkRows, r0, type Results } from './results.js';
import { ROOT } from './settings.js';
import { barChart } from './svg.js';
import type { Target } from './targets.js';

/** The stores a run measured at scale (sqlite, postgres, or a reduced run's fewer). */
export type Scaled = ReadonlyArray<'sqlite' | 'postgres'>;

/** Every chart of the report, in docs/bench. */
export function writeCharts(r: Results, tgt: Target[], scaled: Scaled): void {
  storeCharts(r);
  sectionCharts(r, tgt, scaled);
}

/** Overhead, peers (req/s and CPU), added CPU, floor and round trips: the charts every run has. */
function storeCharts(r: Results): void {
  const overhead = [{ label: 'no Idem (no key)', value: r.plain.rps }];
  for (const store of STORES) {
    overhead.push({ label: `${store}: new keys`, value: r.idem[store].new.rps });
    overhead.push({ label: `${store}: replays`, value: r.idem[store].replay.rps });
    overhead.push({ label: `${store}: replays, cache on`, value: r.idem[store].cached.rps });
    overhead.push({ label: `${store}: raw write+update floor`, value: r.floor[store].write2.rps });
  }
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'overhead.svg'),
    barChart('Requests/s, same Express route (higher is better)', overhead, 'req/s'),
  );
  const peers = [
    { label: 'Idem: new keys', value: r.idem.redis.new.rps },
    { label: 'Idem: replays', value: r.idem.redis.replay.rps },
    { label: 'Idem: replays, cache on', value: r.idem.redis.cached.rps },
  ];
  const cpuBars = [
    { label: 'Idem: new keys', value: r.idem.redis.new.cpuUs - r.plain.cpuUs },
    { label: 'Idem: replays', value: r.idem.redis.replay.cpuUs - r.plain.cpuUs },
    { label: 'Idem: replays, cache on', value: r.idem.redis.cached.cpuUs - r.plain.cpuUs },
  ];
  for (const p of r.peers) {
    peers.push(
      { label: `${p.mode}: new keys`, value: p.new.rps },
      { label: `${p.mode}: replays`, value: p.replay.rps },
    );
    cpuBars.push(
      { label: `${p.mode}: new keys`, value: p.new.cpuUs - r.plain.cpuUs },
      { label: `${p.mode}: replays`, value: p.replay.cpuUs - r.plain.cpuUs },
    );
  }
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'peers.svg'),
    barChart('Requests/s on Express + Redis: Idem vs peers (higher is better)', peers, 'req/s'),
  );
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'peers-cpu.svg'),
    barChart('Added server CPU per request over the bare route, Express + Redis, µs (lower is better)', cpuBars, 'µs'),
  );
  const overheadCpu = [{ label: 'Idem on a null store: new keys', value: (r.nullStore?.cpuUs ?? NaN) - r.plain.cpuUs }];
  for (const store of STORES) {
    overheadCpu.push({ label: `${store}: new keys`, value: r.idem[store].new.cpuUs - r.plain.cpuUs });
    overheadCpu.push({ label: `${store}: replays`, value: r.idem[store].replay.cpuUs - r.plain.cpuUs });
    overheadCpu.push({ label: `${store}: replays, cache on`, value: r.idem[store].cached.cpuUs - r.plain.cpuUs });
  }
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'cpu.svg'),
    barChart('Added server CPU per request over the bare Express route, µs (lower is better)', overheadCpu, 'µs'),
  );
  const floor = STORES.flatMap((store) => [
    { label: `${store}: Idem new keys`, value: r.idem[store].new.rps },
    { label: `${store}: raw write floor`, value: r.floor[store].write.rps },
    { label: `${store}: raw write+update floor`, value: r.floor[store].write2.rps },
    ...(r.floor[store].local ? [{ label: `${store}: Idem local new keys`, value: r.floor[store].local.rps }] : []),
    { label: `${store}: Idem replays`, value: r.idem[store].replay.rps },
    { label: `${store}: raw read floor`, value: r.floor[store].read.rps },
  ]);
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'floor.svg'),
    barChart("Requests/s: Idem against the store's raw operations (higher is better)", floor, 'req/s'),
  );
  const trips = STORES.flatMap((store) => {
    const t = r.idem[store].trips;
    return [
      { label: `${store}: new key`, value: t.new },
      { label: `${store}: replay`, value: t.replay },
      { label: `${store}: conflict`, value: t.conflict },
      { label: `${store}: mismatch`, value: t.mismatch },
      { label: `${store}: cached replay`, value: t.cachedReplay },
    ];
  });
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'trips.svg'),
    barChart('Store round trips per request (budget: new 2, others 1, cached 0)', trips, 'trips'),
  );
}

/** Frameworks, instructions, scale, latency and before/after where the run has them, and the targets. */
function sectionCharts(r: Results, tgt: Target[], scaled: Scaled): void {
  if (r.frameworks) {
    const bars = frameworkRows(r).flatMap(([fw, f]) => [
      { label: `${fw}: no key (no Idem)`, value: f.plain.rps },
      ...(f.floor ? [{ label: `${fw}: floor, 2 raw Redis commands`, value: f.floor.rps }] : []),
      { label: `${fw}: Idem new keys`, value: f.new.rps },
      { label: `${fw}: Idem replays`, value: f.replay.rps },
      ...(f.cached ? [{ label: `${fw}: Idem replays, cache on`, value: f.cached.rps }] : []),
    ]);
    writeFileSync(
      join(ROOT, 'docs', 'bench', 'frameworks.svg'),
      barChart('Requests/s per framework, Idem on Redis (higher is better)', bars, 'req/s'),
    );
  }
  if (r.instructions) {
    const bars = Object.entries(r.instructions.counts).map(([name, value]) => ({
      label: `${name}: instructions`,
      value,
    }));
    writeFileSync(
      join(ROOT, 'docs', 'bench', 'instructions.svg'),
      barChart('Instructions per request, callgrind (lower is better)', bars, 'instr'),
    );
  }
  if (scaled.length > 0) {
    const bars = scaled.flatMap((store) => [
      { label: `${store}: ${r0(r.scale[store].smallN)} records`, value: r.scale[store].small.rps },
      { label: `${store}: ${r0(r.scale[store].largeN)} records`, value: r.scale[store].large.rps },
    ]);
    writeFileSync(
      join(ROOT, 'docs', 'bench', 'scale.svg'),
      barChart('New keys, requests/s at small and large N (higher is better)', bars, 'req/s'),
    );
  }
  if (r.ab) {
    const bars = [
      { label: 'before: null store, new keys', value: r.ab.null.cpuUs - r.plain.cpuUs },
      { label: 'after: null store, new keys', value: (r.nullStore as Load).cpuUs - r.plain.cpuUs },
      { label: 'before: Redis, new keys', value: r.ab.redisNew.cpuUs - r.plain.cpuUs },
      { label: 'after: Redis, new keys', value: r.idem.redis.new.cpuUs - r.plain.cpuUs },
      { label: 'before: Redis, replays', value: r.ab.redisReplay.cpuUs - r.plain.cpuUs },
      { label: 'after: Redis, replays', value: r.idem.redis.replay.cpuUs - r.plain.cpuUs },
    ];
    writeFileSync(
      join(ROOT, 'docs', 'bench', 'before-after.svg'),
      barChart('Added CPU per request over the bare Express route, µs: before vs after (lower is better)', bars, 'µs'),
    );
  }
  if (r.latency) {
    const name = { bare: 'no Idem (bare route)', idem: 'Idem', 'idem-cached': 'Idem, cache on', ni: 'ni' } as const;
    const bars = r.latency.rows.flatMap((row) => {
      const label = `${name[row.subject]}${row.kind === 'none' ? '' : ` ${row.kind}`}, ${row.connections} conn`;
      return [
        { label: `${label}: p50`, value: row.p50 },
        { label: `${label}: p99`, value: row.p99 },
      ];
    });
    writeFileSync(
      join(ROOT, 'docs', 'bench', 'latency.svg'),
      barChart('Latency per request, Express + Redis, ms at 1, 16 and 64 connections (lower is better)', bars, 'ms', 2),
    );
  }
  const ratios = tgt
    .filter((x) => x.ratio !== undefined)
    .map((x) => ({ label: `${x.met ? '' : 'MISSED: '}${x.name}`.slice(0, 60), value: (x.ratio as number) * 100 }));
  writeFileSync(
    join(ROOT, 'docs', 'bench', 'targets.svg'),
    barChart('Targets: measured as % of required (100 % or more is met)', ratios, '%'),
  );
}
