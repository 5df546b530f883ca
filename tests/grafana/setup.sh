#!/bin/sh
# Installs what tests/grafana/check_schema.mjs type-checks the dashboard with: Grafana's own
# TypeScript types (@grafana/schema) and the TypeScript compiler, at the versions
# package-lock.json pins. Needs Node.js >= 18 and the npm registry (or npm's cache). ctest
# runs it as the fixture grafana.setup before grafana.dashboard. Idempotent.
set -eu
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --prefer-offline
