#!/usr/bin/env bash
# Debian packages the project needs at run or test time. Idempotent; a no-op when all are present.
#   sqlite3: inspect BIRD databases by hand.  util-linux: unshare/setpriv for the sandbox.
#   chromium: the headless browser the UI test drives through Playwright (never downloaded by Playwright).
#   postgresql, redis-server: the metadata DB and broker of the multi-worker cluster (make cluster, its test).
set -euo pipefail
need=()
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "Missing Debian packages: ${need[*]} (install them as root: apt-get install ${need[*]})" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" > /dev/null
