/**
 * A process that holds a claim for the pause test: it acquires `TEST_KEY` with a 5 s lease in the
 * run `TEST_SCOPE_ID`, prints `HELD`, then every 100 ms prints what its lease says (`CHECK lost=...
 * aborted=...`), so the test can stop it (SIGSTOP) past its lease and see what it reports on waking.
 */

import { Runstate } from 'runstate-sdk';

const rs = new Runstate({ holder: 'paused-holder' });
const lease = await rs.scope(process.env.TEST_SCOPE_ID!).claim(process.env.TEST_KEY!).acquire({ leaseSeconds: 5 });
console.log(`HELD ${lease.generation}`);
setInterval(() => {
  console.log(`CHECK lost=${lease.isLost} aborted=${lease.signal.aborted} code=${lease.lostError?.code ?? '-'}`);
}, 100);
