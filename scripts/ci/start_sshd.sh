#!/usr/bin/env bash
# Starts a throwaway OpenSSH server on loopback for the launcher tests
# (tests/parent/launcher_test.ts), idempotently: a host key and a client key
# made for it, listening on 127.0.0.1 only, accepting that one key for the
# current user. Writes the ssh argv prefix the tests use to
# $AIRLOCK_SSHD_DIR/launcher.json and prints it.
#
# Usage: bash scripts/ci/start_sshd.sh          start (or reuse) the server
#        bash scripts/ci/start_sshd.sh stop     stop it and remove its files
#
# Environment: AIRLOCK_SSHD_DIR (default /tmp/airlock-sshd),
# AIRLOCK_SSHD_PORT (default 2222). Installs Debian's openssh-server when
# sshd is missing and this runs as root.
set -euo pipefail

dir="${AIRLOCK_SSHD_DIR:-/tmp/airlock-sshd}"
port="${AIRLOCK_SSHD_PORT:-2222}"
user="$(id -un)"

stop() {
  if [[ -f "$dir/sshd.pid" ]]; then
    kill "$(cat "$dir/sshd.pid")" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

if [[ "${1:-}" == "stop" ]]; then
  stop
  exit 0
fi

sshd_bin="$(command -v sshd || true)"
[[ -z "$sshd_bin" && -x /usr/sbin/sshd ]] && sshd_bin=/usr/sbin/sshd
if [[ -z "$sshd_bin" || -z "$(command -v ssh || true)" ]]; then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends openssh-server openssh-client >/dev/null 2>&1 ||
      { apt-get update >/dev/null && apt-get install -y --no-install-recommends openssh-server openssh-client >/dev/null; }
    sshd_bin=/usr/sbin/sshd
  else
    echo "start_sshd: sshd is not installed (Debian: apt-get install openssh-server)" >&2
    exit 1
  fi
fi
ssh_bin="$(command -v ssh)"

mkdir -p "$dir"
chmod 700 "$dir"
[[ -f "$dir/host_ed25519" ]] || ssh-keygen -q -t ed25519 -N "" -C airlock-test-host -f "$dir/host_ed25519"
[[ -f "$dir/client_ed25519" ]] || ssh-keygen -q -t ed25519 -N "" -C airlock-test-client -f "$dir/client_ed25519"
cp "$dir/client_ed25519.pub" "$dir/authorized_keys"
chmod 600 "$dir/authorized_keys"
printf '[127.0.0.1]:%s %s\n' "$port" "$(cut -d' ' -f1,2 "$dir/host_ed25519.pub")" >"$dir/known_hosts"

cat >"$dir/sshd_config" <<CONFIG
# Throwaway sshd for airlock's launcher tests: loopback only, one key.
Port $port
ListenAddress 127.0.0.1
HostKey $dir/host_ed25519
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
AllowUsers $user
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
PrintLastLog no
MaxStartups 64:30:128
MaxSessions 64
LogLevel ERROR
CONFIG

launcher=(
  "$ssh_bin" -F /dev/null -T
  -i "$dir/client_ed25519" -o IdentitiesOnly=yes
  -o UserKnownHostsFile="$dir/known_hosts" -o StrictHostKeyChecking=yes
  -o BatchMode=yes -o LogLevel=ERROR -o ConnectTimeout=10
  -o ServerAliveInterval=5 -o ServerAliveCountMax=3
  -p "$port" "$user@127.0.0.1" --
)

running=false
if [[ -f "$dir/sshd.pid" ]] && kill -0 "$(cat "$dir/sshd.pid")" 2>/dev/null; then
  running=true
fi
if ! $running; then
  mkdir -p /run/sshd
  "$sshd_bin" -t -f "$dir/sshd_config"
  "$sshd_bin" -f "$dir/sshd_config" -E "$dir/sshd.log"
fi

for _ in $(seq 1 100); do
  if "${launcher[@]}" true 2>/dev/null; then
    break
  fi
  sleep 0.1
done
if ! "${launcher[@]}" true; then
  echo "start_sshd: cannot log in to the test sshd on 127.0.0.1:$port; its log:" >&2
  cat "$dir/sshd.log" >&2 || true
  exit 1
fi

{
  printf '{\n  "launcher": ['
  sep=""
  for arg in "${launcher[@]}"; do
    printf '%s"%s"' "$sep" "$arg"
    sep=", "
  done
  printf '],\n  "host": "127.0.0.1",\n  "port": %s,\n  "user": "%s",\n  "pidFile": "%s"\n}\n' "$port" "$user" "$dir/sshd.pid"
} >"$dir/launcher.json.tmp"
mv "$dir/launcher.json.tmp" "$dir/launcher.json"
echo "start_sshd: sshd listening on 127.0.0.1:$port (pid $(cat "$dir/sshd.pid")); launcher in $dir/launcher.json"
cat "$dir/launcher.json"
