/**
 * A worker process for the takeover tests: consume() with a 5 s lease whose handler announces the
 * delivery on stdout and then works "forever", so the test can kill the process mid-task.
 * Configured by the RUNSTATE_* variables, TEST_SCOPE_ID and TEST_MAILBOX.
 */

import { Runstate } from 'runstate-sdk';

const rs = new Runstate({ holder: 'worker-a' });
const run = rs.scope(process.env.TEST_SCOPE_ID!);

await run.mailbox(process.env.TEST_MAILBOX!).consume(
  async (data, delivery) => {
    console.log(`HANDLING ${JSON.stringify({ id: delivery.id, attempt: delivery.attempt, data })}`);
    await new Promise(() => setInterval(() => undefined, 1_000));
  },
  { leaseSeconds: 5 },
);
