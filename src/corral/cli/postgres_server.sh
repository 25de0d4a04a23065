#!/usr/bin/env bash
# The PostgreSQL server of a `corral up --controllers N` cluster (corral.cli.up_postgres runs it); a
# sibling of scripts/pg-test-server.sh, made to keep a cluster's data rather than to be thrown away.
#
#   postgres_server.sh start DATA_DIR PORT   install PostgreSQL if it is missing (apt-get, as root),
#                                            initialise DATA_DIR the first time, start the server (a
#                                            running one is kept) and print the database URL
#   postgres_server.sh stop DATA_DIR         stop the server; the data stays for the next start
#
# No TCP: the server listens on a Unix socket in DATA_DIR only, and lets in only the user who runs this
# script (peer authentication): no password, and neither other users nor the network reach the data.
# Durable settings (PostgreSQL's defaults): the cluster's jobs live there.
set -euo pipefail

DB_NAME=corral
USER_NAME="$(id -un)"

die() { echo "postgres_server: $*" >&2; exit 1; }

source "$(dirname "${BASH_SOURCE[0]}")/postgres_common.sh"

init_cluster() {
    mkdir -p "$DATA_DIR"
    if [[ "$(id -u)" -eq 0 ]]; then
        chown postgres: "$DATA_DIR"
    fi
    chmod 700 "$DATA_DIR"
    # The superuser is named after us: peer authentication lets exactly this user in.
    as_owner "$BIN/initdb" -D "$DATA_DIR" -U "$USER_NAME" --auth-local=peer --auth-host=reject \
        --encoding=UTF8 >/dev/null
}

start_server() {
    as_owner "$BIN/pg_ctl" start -D "$DATA_DIR" -w -t 60 -l "$DATA_DIR/server.log" \
        -o "-c listen_addresses='' -p $PORT -c unix_socket_directories=$DATA_DIR \
            -c unix_socket_permissions=0700 -c max_connections=200" >/dev/null \
        || { tail -n 20 "$DATA_DIR/server.log" >&2; die "the server did not start (log: $DATA_DIR/server.log)"; }
}

ensure_database() {
    local psql=("$BIN/psql" -h "$DATA_DIR" -p "$PORT" -U "$USER_NAME" -d postgres -tAq)
    if [[ "$("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]]; then
        "${psql[@]}" -c "CREATE DATABASE $DB_NAME" >/dev/null
    fi
}

cmd_start() {
    BIN="$(find_bin_dir)" || { install_postgres; BIN="$(find_bin_dir)" || die "no initdb after install"; }
    if ! is_running; then
        if [[ ! -f "$DATA_DIR/PG_VERSION" ]]; then
            [[ -z "$(ls -A "$DATA_DIR" 2>/dev/null)" ]] || die "$DATA_DIR is not empty and holds no PostgreSQL data"
            init_cluster
        fi
        start_server
    fi
    ensure_database
    echo "postgresql+psycopg://$USER_NAME@/$DB_NAME?host=$DATA_DIR&port=$PORT"
}

cmd_stop() {
    BIN="$(find_bin_dir)" || exit 0
    if is_running; then
        as_owner "$BIN/pg_ctl" stop -D "$DATA_DIR" -m fast -w >/dev/null
    fi
}

case "${1:-}" in
    start) [[ $# -eq 3 ]] || die "usage: $0 start DATA_DIR PORT"; DATA_DIR="$2"; PORT="$3"; cmd_start ;;
    stop) [[ $# -eq 2 ]] || die "usage: $0 stop DATA_DIR"; DATA_DIR="$2"; cmd_stop ;;
    *) die "usage: $0 start DATA_DIR PORT | stop DATA_DIR" ;;
esac
