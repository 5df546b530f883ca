// Proof with AWS's own client (npm @aws-sdk/ec2-metadata-service) that `spotvisor
// mock-metadata --provider aws --imdsv2-required` speaks IMDSv2: a session token, 404
// before the interruption notice, the notice JSON after the flip.
// Usage: node aws_instance_action.js PORT
'use strict';

const {control, check, port, run} = require('./common');
const {MetadataService} = require('@aws-sdk/ec2-metadata-service');

const p = port();

run(async () => {
  const imds = new MetadataService({
    endpoint: `http://127.0.0.1:${p}`,
    ec2MetadataV1Disabled: true,  // tokens only, as --imdsv2-required demands
    httpOptions: {timeout: 2000},
    retries: 0,
  });
  const token = await imds.fetchMetadataToken();
  check(typeof token === 'string' && token.length >= 20, 'a session token');
  const instanceType = await imds.request('/latest/meta-data/instance-type', {});
  check(instanceType === 'g5.xlarge', `instance-type (got ${instanceType})`);
  const zone = await imds.request('/latest/meta-data/placement/availability-zone', {});

  let status = 0;
  try {
    await imds.request('/latest/meta-data/spot/instance-action', {});
  } catch (error) {
    status = error.$metadata && error.$metadata.httpStatusCode;
  }
  check(status === 404, `spot/instance-action is 404 before the notice (got ${status})`);

  await control(p, 'preempt', JSON.stringify({action: 'terminate', deadline_in_s: 120}));
  const body = await imds.request('/latest/meta-data/spot/instance-action', {});
  const notice = JSON.parse(body);
  check(notice.action === 'terminate', `action is terminate (got ${notice.action})`);
  const left = (Date.parse(notice.time) - Date.now()) / 1000;
  check(left > 100 && left <= 121, `time is about two minutes ahead (got ${left}s)`);
  return {token_length: token.length, instanceType, zone, notice};
});
