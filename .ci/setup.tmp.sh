#!/usr/bin/env bash
# CI entry point: runs on a clean clone with CI=true. Installs what the tests
# need when a fresh machine lacks it, then runs the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true

apt_updated=
need_pkg() { # need_pkg COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ -z "$apt_updated" ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2"
}
need_pkg go golang-go
need_pkg python3 python3
need_pkg make make
need_pkg git git
need_pkg chromium chromium   # the dashboard's browser tests (webtest/)
need_pkg promtool prometheus # `promtool check metrics` on the /metrics scrapes (internal/promcheck)
need_pkg node nodejs         # the OpenAPI document's validator (httpapi/openapi_test.go)
need_pkg npm npm

# @apidevtools/swagger-parser, pinned by tools/openapi/package-lock.json.
npm ci --prefix tools/openapi --no-audit --no-fund

# Redis and MariaDB for the distributed backends' conformance suites.
bash scripts/services.sh

# Servers the tests run, built from the Go module proxy in tools modules of
# their own and cached under a name keyed by the tools module (the name
# internal/toolbin looks for), so a version bump builds anew: a
# Nacos-protocol server (Polaris) for the gateway's discovery tests, and an
# S3 server (SeaweedFS) for the S3 artifact store. Cold: ≈ 6 and 5-8 min on
# 2 cores.
tool_bin() { # tool_bin NAME MODULE_DIR PACKAGE
  local key bin
  key=$(cat "$2/go.mod" "$2/go.sum" | sha256sum | cut -c1-12)
  bin="${RLSCHED_CACHE_DIR:-$HOME/.cache/rlsched}/$1-$key"
  if [ ! -x "$bin" ]; then
    mkdir -p "$(dirname "$bin")"
    go -C "$2" build -trimpath -ldflags='-s -w' -o "$bin.tmp" "$3"
    mv "$bin.tmp" "$bin"
  fi
}
tool_bin polaris-server tools/nacos-server github.com/polarismesh/polaris
tool_bin weed tools/seaweedfs github.com/seaweedfs/seaweedfs/weed

