// Proof with Google's own client (npm gcp-metadata) that `spotvisor mock-metadata
// --provider gcp` speaks the GCE metadata protocol: detection, instance/preempted, and a
// wait_for_change long-poll that returns at the flip (POST /__spotvisor/preempt).
// Usage: node gcp_preempted.js PORT
'use strict';

const {control, check, port, run} = require('./common');

const p = port();
process.env.GCE_METADATA_HOST = `127.0.0.1:${p}`;
const gcp = require('gcp-metadata');

run(async () => {
  check(await gcp.isAvailable(), 'isAvailable() is true (Metadata-Flavor: Google on answers)');
  const before = await gcp.instance('preempted');
  check(before === 'FALSE', `instance/preempted before the flip is FALSE (got ${before})`);
  const zone = await gcp.instance('zone');
  check(/zones\//.test(zone), `instance/zone looks like projects/N/zones/Z (got ${zone})`);
  const projectId = await gcp.project('project-id');
  check(typeof projectId === 'string' && projectId.length > 0, 'project/project-id');

  // The long-poll is pending in the server when the flip happens; it must return then.
  const started = Date.now();
  const waiting = gcp.instance({property: 'preempted', params: {wait_for_change: true}});
  await new Promise(resolve => setTimeout(resolve, 300));
  const flippedAt = Date.now();
  await control(p, 'preempt');
  const after = await waiting;
  const returnedAt = Date.now();
  check(after === 'TRUE', `the long-poll returned TRUE at the flip (got ${after})`);
  check(returnedAt - started >= 300, 'the long-poll was held until the flip');
  return {before, after, zone, projectId, flip_to_answer_ms: returnedAt - flippedAt};
});
