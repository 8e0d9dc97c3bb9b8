#!/usr/bin/env bash
# Makes sure the services the tests need are up on this machine: PostgreSQL on
# 127.0.0.1:5432 (user postgres, trust auth, max_connections at least 300),
# RabbitMQ on 127.0.0.1:5672
# (guest/guest), the nats-server binary (the NATS tests start servers of
# their own on free ports; the machine's server on 4222 is started too when
# it is installed but stopped), Debian's chromium (the console's browser
# tests run it headless themselves) and Debian's prometheus (the deploy
# check runs its own server on a free port; the package's service is not
# started), node and npm (make gencheck installs its pinned npm tools with
# npm ci), and a PgBouncer of the tests' own on 127.0.0.1:6432 in
# transaction mode in front of that PostgreSQL (Debian's package; its
# system service is not started). Starts them when stopped and installs
# Debian's packages when absent. Safe to run again and again. Kafka needs
# nothing: its tests run franz-go's kfake in process.
set -euo pipefail

log() { printf 'services: %s\n' "$*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
	local port=$1 name=$2 i
	for i in $(seq 1 120); do
		port_open "$port" && return 0
		sleep 0.5
	done
	log "$name did not open port $port within 60s"
	return 1
}

# apt_install [--no-install-recommends] PACKAGE...: Debian's packages, the
# package lists updated once per run.
apt_updated=0
apt_install() {
	local opts=()
	if [ "$1" = --no-install-recommends ]; then
		opts=("$1")
		shift
	fi
	if [ "$(id -u)" != 0 ]; then
		log "need root to install $*"
		return 1
	fi
	if [ "$apt_updated" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		apt_updated=1
	fi
	log "installing $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${opts[@]}" "$@" >/dev/null
}

postgres() {
	if ! port_open 5432; then
		if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
			apt_install postgresql
		fi
		local version
		version=$(ls /etc/postgresql | sort -V | tail -n 1)
		log "starting PostgreSQL $version"
		pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
		wait_port 5432 PostgreSQL
	fi
	# A fresh Debian cluster asks for a password over TCP; the tests connect
	# as postgres without one, as on the project's machines.
	if ! psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1; then
		local hba
		hba=$(su postgres -c "psql -Atqc 'show hba_file'" 2>/dev/null || true)
		if [ -n "$hba" ] && [ -w "$hba" ]; then
			log "allowing trust auth for postgres on 127.0.0.1 in $hba"
			sed -i '1i host all postgres 127.0.0.1/32 trust\nhost all postgres ::1/128 trust' "$hba"
			su postgres -c "psql -Atqc 'select pg_reload_conf()'" >/dev/null
		fi
		psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null
	fi
	# make test runs the short chaos run (processes of its own, each with
	# a pool) beside the Go tests, whose packages run two at a time with
	# pools of their own: more than the 100 connections a fresh cluster
	# allows (FATAL: sorry, too many clients already). A machine's own
	# cluster is raised to PG_MIN_CONNECTIONS once, with a restart; the
	# setting stays in postgresql.auto.conf.
	local have want=${PG_MIN_CONNECTIONS:-300}
	have=$(psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'show max_connections')
	if [ "$have" -lt "$want" ]; then
		local version
		version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
		if [ -z "$version" ] || ! command -v pg_ctlcluster >/dev/null 2>&1; then
			log "PostgreSQL allows $have connections, make test needs $want: raise max_connections"
			return 1
		fi
		log "raising PostgreSQL's max_connections from $have to $want (restart)"
		psql -h 127.0.0.1 -U postgres -d postgres -Atqc "alter system set max_connections = $want" >/dev/null
		pg_ctlcluster --skip-systemctl-redirect "$version" main restart
		wait_port 5432 PostgreSQL
		local i
		for i in $(seq 1 60); do
			psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1 && break
			sleep 0.5
		done
	fi
	log "PostgreSQL ready"
}

rabbitmq() {
	if ! port_open 5672; then
		if ! command -v rabbitmq-server >/dev/null 2>&1; then
			apt_install rabbitmq-server
		fi
		# The node may be up with its app stopped (a test stops it on
		# purpose); ping answers for a running node either way.
		if rabbitmqctl -q ping >/dev/null 2>&1; then
			log "starting the RabbitMQ app"
			rabbitmqctl -q start_app
		else
			log "starting RabbitMQ"
			rabbitmq-server -detached
			rabbitmqctl -q await_startup --timeout 120 >/dev/null 2>&1 || true
		fi
		wait_port 5672 RabbitMQ
	fi
	log "RabbitMQ ready"
}

nats() {
	if ! command -v nats-server >/dev/null 2>&1; then
		apt_install nats-server
	fi
	if ! port_open 4222; then
		mkdir -p /var/lib/nats-server
		start-stop-daemon --start --oknodo --background --exec "$(command -v nats-server)" -- \
			-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || true
		wait_port 4222 NATS || log "the machine's NATS did not start; the NATS tests start their own servers"
	fi
	log "NATS ready ($(nats-server --version 2>&1 | head -n 1))"
}

browser() {
	if ! command -v chromium >/dev/null 2>&1; then
		apt_install chromium
	fi
	log "chromium ready ($(chromium --version 2>/dev/null | head -n 1))"
}

prometheus_bin() {
	if ! command -v prometheus >/dev/null 2>&1; then
		# --no-install-recommends: the server and promtool, not the exporters.
		apt_install --no-install-recommends prometheus || return 1
	fi
	log "prometheus ready ($(prometheus --version 2>&1 | head -n 1))"
}

# pooler starts the tests' own PgBouncer: 127.0.0.1:6432, every
# database of the PostgreSQL on 127.0.0.1:5432, pool_mode = transaction
# and PgBouncer's defaults otherwise (no ignore_startup_parameters: herald
# must connect without one), but for max_client_conn: the tests' stores
# open more than its default 100 client connections at once. Trust auth
# like that PostgreSQL's; the user must still be listed in auth_file. Its
# configuration, pid file and log live in a directory of their own, and it
# runs as postgres (pgbouncer refuses to run as root).
pooler() {
	local dir=${PGBOUNCER_DIR:-/var/lib/herald-pgbouncer} port=6432 bin
	if ! type -P pgbouncer >/dev/null; then
		apt_install pgbouncer
	fi
	bin=$(type -P pgbouncer)
	if ! port_open "$port"; then
		mkdir -p "$dir"
		printf '%s\n' \
			'[databases]' \
			'* = host=127.0.0.1 port=5432' \
			'' \
			'[pgbouncer]' \
			'listen_addr = 127.0.0.1' \
			"listen_port = $port" \
			"unix_socket_dir = $dir" \
			'auth_type = trust' \
			"auth_file = $dir/userlist.txt" \
			'pool_mode = transaction' \
			'max_client_conn = 2000' \
			"pidfile = $dir/pgbouncer.pid" \
			"logfile = $dir/pgbouncer.log" >"$dir/pgbouncer.ini"
		printf '"postgres" ""\n' >"$dir/userlist.txt"
		log "starting PgBouncer on 127.0.0.1:$port"
		if [ "$(id -u)" = 0 ]; then
			chown -R postgres: "$dir"
			"$bin" -d -u postgres "$dir/pgbouncer.ini"
		else
			"$bin" -d "$dir/pgbouncer.ini"
		fi
		wait_port "$port" PgBouncer
	fi
	log "PgBouncer ready ($("$bin" --version 2>&1 | head -n 1), transaction mode on 127.0.0.1:$port)"
}

node_npm() {
	# Debian's nodejs and npm, unless a node and an npm are installed
	# already (from any source: installing Debian's npm beside another
	# nodejs would conflict with it).
	if ! command -v node >/dev/null 2>&1; then
		apt_install nodejs npm
	elif ! command -v npm >/dev/null 2>&1; then
		apt_install npm
	fi
	log "node ready ($(node --version), npm $(npm --version))"
}

postgres
rabbitmq
nats
browser
prometheus_bin
node_npm
pooler
