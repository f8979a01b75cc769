#!/usr/bin/env bash
# Starts a throwaway redis-server on 127.0.0.1 on a free port, no
# persistence, in directory $1; prints {"port": N, "pid": N}.
# Usage: start_redis.sh DIR | start_redis.sh stop DIR
set -euo pipefail
if [[ "${1:-}" == "stop" ]]; then
  dir="$2"
  [[ -f "$dir/redis.pid" ]] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
  rm -rf "$dir"
  exit 0
fi
dir="$1"
command -v redis-server >/dev/null || { echo "start_redis: redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
mkdir -p "$dir"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
  --dir "$dir" --pidfile "$dir/redis.pid" --daemonize yes --logfile "$dir/redis.log" >/dev/null
for _ in $(seq 1 100); do
  if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
    printf '{"port": %s, "pid": %s}\n' "$port" "$(cat "$dir/redis.pid")"
    exit 0
  fi
  sleep 0.1
done
echo "start_redis: redis-server did not answer on 127.0.0.1:$port; its log:" >&2
cat "$dir/redis.log" >&2 || true
exit 1
