#!/bin/sh
# Installs the official metadata clients (gcp-metadata, @aws-sdk/ec2-metadata-service)
# that tests/integration/mock_npm_clients_test.cpp uses to prove the mock speaks the real
# protocols. Needs Node.js >= 18 and the npm registry. Idempotent.
set -eu
cd "$(dirname "$0")"
if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund
else
  npm install --no-audit --no-fund
fi
