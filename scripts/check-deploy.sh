#!/usr/bin/env bash
# Checks the files under deploy/: the Prometheus rules (syntax and their unit
# tests), the Prometheus configuration and the Grafana dashboard JSON.
# Installs Debian's prometheus package (for promtool) when promtool is absent.
# Run from anywhere; exits non-zero on the first failure.
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf 'check-deploy: %s\n' "$*" >&2; }

if ! command -v promtool >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		log "promtool not found and not root: install Debian's prometheus package"
		exit 1
	fi
	log "installing promtool (Debian package prometheus)"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	# --no-install-recommends: promtool is all we need, not the exporters.
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

log "promtool check rules"
promtool check rules deploy/prometheus/alerts.yml

log "promtool test rules"
promtool test rules deploy/prometheus/alerts_test.yml

# prometheus.yml names its rule file relative to itself (that is how
# Prometheus resolves it, and how the compose file mounts both side by side).
log "promtool check config"
promtool check config deploy/prometheus/prometheus.yml

log "grafana dashboard JSON and its PromQL"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Every panel query becomes a recording rule (JSON is YAML), with the
# dashboard variables replaced by values, so promtool parses the PromQL.
python3 - deploy/grafana/herald.json "$tmp/dashboard-rules.yml" <<'PY'
import json, sys

path, out = sys.argv[1], sys.argv[2]
with open(path) as f:
    d = json.load(f)
panels = d.get("panels") or []
if not panels:
    sys.exit(f"{path}: no panels")
ids = [p.get("id") for p in panels]
if len(ids) != len(set(ids)):
    sys.exit(f"{path}: duplicate panel ids")
rules = []
for p in panels:
    if p.get("type") == "row":
        continue
    targets = p.get("targets") or []
    if not targets:
        sys.exit(f"{path}: panel {p.get('title')!r} has no targets")
    for t in targets:
        expr = t["expr"].replace("$__rate_interval", "5m").replace("$job", ".*")
        rules.append({"record": f"herald:dashboard:panel{p['id']}_{t['refId']}", "expr": expr})
with open(out, "w") as f:
    json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
PY
promtool check rules "$tmp/dashboard-rules.yml" >/dev/null

log "all deploy checks passed"
