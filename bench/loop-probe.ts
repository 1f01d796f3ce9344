/**
 * @module Preloaded into a server child by bench/worst-case.ts (`--import ./bench/loop-probe.ts`, forked with an IPC
 * channel): the longest event-loop turn between two IPC messages. `'reset'` starts a window; `'read'` answers with
 * the longest turn since, in ms, sampled every 1 ms (perf_hooks.monitorEventLoopDelay).
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';

const delay = monitorEventLoopDelay({ resolution: 1 });
delay.enable();
process.on('message', (message) => {
  if (message === 'reset') {
    delay.reset();
    // A reset histogram records from its second tick on (the first only notes the time): answer once it has
    // ticked, so a turn that starts at once after the answer is still measured.
    setTimeout(() => process.send?.('reset'), 5);
  } else if (message === 'read') {
    // A sample is the time between two 1 ms ticks: a loop held for B ms records about B + 1. No sample: every
    // turn was shorter than the tick.
    process.send?.({ maxMs: delay.count === 0 ? 1 : delay.max / 1e6 });
  }
});
// The IPC channel must not keep a server alive that was told to stop.
process.channel?.unref();
