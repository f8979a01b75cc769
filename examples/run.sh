#!/usr/bin/env bash
# Installs each example's own dependencies (from its lockfile) and runs it on
# Deno and on Bun. Each example exits non-zero if what it shows does not hold.
# Usage: examples/run.sh [duckdb|lancedb|sqlite_export|otel|postgres|bullmq]...   (default: all)
set -euo pipefail
cd "$(dirname "$0")"
root="$(cd .. && pwd)"
deno="${DENO:-$root/node_modules/.bin/deno}"
bun="${BUN:-$root/node_modules/.bin/bun}"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(duckdb lancedb sqlite_export otel postgres bullmq)
for name in "${names[@]}"; do
  if [ -f "$name/package.json" ]; then
    echo "== examples/$name: npm ci"
    (cd "$name" && npm ci --no-audit --no-fund --loglevel=error)
  fi
  echo "== examples/$name on Deno"
  (cd "$name" && "$deno" run -A main.ts)
  echo "== examples/$name on Bun"
  (cd "$name" && "$bun" main.ts)
done
