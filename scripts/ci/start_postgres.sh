#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server on loopback for the network-grant
# tests (tests/security/net_host_test.ts, the network bench row): a cluster
# made by initdb in a directory of its own, listening on 127.0.0.1 only, on a
# free port, with trust authentication for connections from 127.0.0.1 (user
# "airlock", database "airlock"). Root cannot run postgres: as root the
# server runs as the system user "nobody". Prints one line of JSON:
# {"host":"127.0.0.1","port":N,"user":"airlock","database":"airlock","dir":"..."}.
#
# Usage: bash scripts/ci/start_postgres.sh DIR        start a server in DIR (made, must not exist)
#        bash scripts/ci/start_postgres.sh stop DIR   stop it and remove DIR
#
# Environment: AIRLOCK_PG_BIN (default: the directory of initdb on PATH, else
# /usr/lib/postgresql/*/bin), AIRLOCK_PG_PORT (default: a free port).
set -euo pipefail

find_bin() {
  if [[ -n "${AIRLOCK_PG_BIN:-}" ]]; then echo "$AIRLOCK_PG_BIN"; return; fi
  for dir in /usr/lib/postgresql/*/bin; do
    [[ -x "$dir/postgres" ]] && { echo "$dir"; return; }
  done
  local initdb
  initdb="$(command -v initdb || true)"
  [[ -n "$initdb" ]] && { dirname "$(readlink -f "$initdb")"; return; }
  echo "PostgreSQL binaries not found: install Debian's postgresql package (apt-get install postgresql) or set AIRLOCK_PG_BIN" >&2
  exit 1
}

as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"
  else
    "$@"
  fi
}

if [[ "${1:-}" == "stop" ]]; then
  dir="${2:?usage: start_postgres.sh stop DIR}"
  bin="$(find_bin)"
  if [[ -f "$dir/data/postmaster.pid" ]]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  exit 0
fi

dir="${1:?usage: start_postgres.sh DIR}"
bin="$(find_bin)"
port="${AIRLOCK_PG_PORT:-}"
if [[ -z "$port" ]]; then
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
fi
mkdir -m 0700 "$dir"
if [[ "$(id -u)" == 0 ]]; then chown nobody:nogroup "$dir"; fi
as_owner "$bin/initdb" -D "$dir/data" -U airlock -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 ||
  { cat "$dir/initdb.log" >&2; exit 1; }
cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 16MB
max_connections = 40
logging_collector = off
CONF
cat >"$dir/data/pg_hba.conf" <<HBA
local all all trust
host all all 127.0.0.1/32 trust
HBA
as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
  { cat "$dir/server.log" >&2; exit 1; }
as_owner "$bin/createdb" -h "$dir" -p "$port" -U airlock airlock
printf '{"host":"127.0.0.1","port":%s,"user":"airlock","database":"airlock","dir":"%s"}\n' "$port" "$dir"
