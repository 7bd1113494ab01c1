/**
 * A worker process for the run API tests: it defines the queue `review` with a handler (a score
 * from the document; a document named `bad` fails) and serves it until SIGTERM, in the run named by
 * `RUNSTATE_RUN`. Each job prints `JOB <doc> attempt=<n>`; the end prints `STOPPED`.
 */

import { context, queue, serve } from 'runstate-sdk';

queue<{ doc: string; score: number }, { doc: string; score: number; attempt: number }>(
  'review',
  async (input) => {
    const ctx = context()!;
    console.log(`JOB ${input.doc} attempt=${ctx.attempt}`);
    if (input.doc === 'bad') throw new Error(`cannot review ${input.doc}`);
    if (input.doc === 'slow') {
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
      console.log(`ABORTED ${input.doc} ${(ctx.signal.reason as Error)?.name}`);
    }
    return { doc: input.doc, score: input.score, attempt: ctx.attempt };
  },
  { attempts: 2, concurrency: 4 },
);

await serve();
console.log('STOPPED');
