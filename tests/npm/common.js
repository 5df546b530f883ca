// Shared by the protocol proofs: talks to the mock's control path with plain node:http
// and keeps proxies out of the way (metadata requests must never go through a proxy).
'use strict';

for (const name of ['HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy', 'ALL_PROXY', 'all_proxy']) {
  delete process.env[name];
}

const http = require('node:http');

// POST /__spotvisor/<what> on the mock; resolves with the parsed JSON state.
function control(port, what, body = '') {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {host: '127.0.0.1', port, method: 'POST', path: `/__spotvisor/${what}`,
       headers: {'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body)}},
      res => {
        let data = '';
        res.on('data', chunk => (data += chunk));
        res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(data))
                                                      : reject(new Error(`${what}: HTTP ${res.statusCode} ${data}`))));
      });
    req.on('error', reject);
    req.end(body);
  });
}

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

function port() {
  const p = Number(process.argv[2]);
  if (!Number.isInteger(p) || p <= 0) {
    console.error(`usage: node ${process.argv[1]} PORT  (of a running spotvisor mock-metadata)`);
    process.exit(64);
  }
  return p;
}

// Runs `main`, prints one JSON line, exits (kept-alive sockets must not hold the process).
function run(main) {
  main().then(
    result => {
      console.log(JSON.stringify({ok: true, ...result}));
      process.exit(0);
    },
    error => {
      console.log(JSON.stringify({ok: false, error: String((error && error.stack) || error)}));
      process.exit(1);
    });
}

module.exports = {control, check, port, run};
