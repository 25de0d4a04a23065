#!/usr/bin/env bash
# Throwaway PostgreSQL for corral's store tests.
#
#   scripts/pg-test-server.sh          start (idempotent) and print the URL
#   scripts/pg-test-server.sh status   exit 0 if running (and print the URL), else 1
#   scripts/pg-test-server.sh stop     stop it and delete its data dir
#   scripts/pg-test-server.sh restart  stop it at once (as a crash would) and start it again, data kept
#
# Listens on 127.0.0.1 only, trusts every local connection, and trades durability for speed
# (fsync off): never point anything but tests at it. Tests create their own schemas in it.
# CORRAL_PG_DURABLE=1 keeps PostgreSQL's durable defaults: the fault suite crashes the server, and a
# commit acknowledged to a client must survive that.
set -euo pipefail

PORT="${CORRAL_PG_PORT:-55432}"
DATA_DIR="${CORRAL_PG_DIR:-/tmp/corral-pg-test-$PORT}"
DB_NAME=corral_test
# The fault suite runs a server on a virtual host (tests/chaos): it listens there too, and trusts that
# host's private network (CORRAL_PG_ALLOW, a CIDR) besides loopback.
HOST="${CORRAL_PG_HOST:-127.0.0.1}"
LISTEN="127.0.0.1"
[[ "$HOST" == 127.0.0.1 ]] || LISTEN="127.0.0.1,$HOST"
URL="postgresql+psycopg://postgres@$HOST:$PORT/$DB_NAME"
LOCK_FILE="/tmp/corral-pg-test-$PORT.lock"

die() { echo "pg-test-server: $*" >&2; exit 1; }

source "$(dirname "${BASH_SOURCE[0]}")/../src/corral/cli/postgres_common.sh"

init_cluster() {
    rm -rf "$DATA_DIR"
    mkdir -p "$DATA_DIR"
    if [[ "$(id -u)" -eq 0 ]]; then
        chown postgres: "$DATA_DIR"
    fi
    chmod 700 "$DATA_DIR"
    as_owner "$BIN/initdb" -D "$DATA_DIR" -U postgres --auth=trust --encoding=UTF8 \
        --no-sync >/dev/null
    if [[ -n "${CORRAL_PG_ALLOW:-}" ]]; then
        echo "host all all $CORRAL_PG_ALLOW trust" >> "$DATA_DIR/pg_hba.conf"
    fi
}

start_server() {
    local speed="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    [[ "${CORRAL_PG_DURABLE:-0}" == 1 ]] && speed=""
    # 9>&-: the server must not inherit the lock (fd 9), or it holds it for its whole life.
    # The socket goes in the data dir: /var/run/postgresql may not exist or be writable.
    as_owner "$BIN/pg_ctl" start -D "$DATA_DIR" -w -t 60 -l "$DATA_DIR/server.log" \
        -o "-c listen_addresses=$LISTEN -p $PORT -c unix_socket_directories=$DATA_DIR \
            $speed -c max_connections=300" >/dev/null 9>&- \
        || { tail -n 20 "$DATA_DIR/server.log" >&2; die "server did not start"; }
}

ensure_database() {
    local psql=("$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -tAq)
    if [[ "$("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]]; then
        "${psql[@]}" -c "CREATE DATABASE $DB_NAME" >/dev/null
    fi
}

cmd_start() {
    BIN="$(find_bin_dir)" || { install_postgres; BIN="$(find_bin_dir)" || die "no initdb after install"; }
    if ! is_running; then
        [[ -f "$DATA_DIR/PG_VERSION" ]] || init_cluster
        start_server
    fi
    ensure_database
    echo "$URL"
}

cmd_status() {
    BIN="$(find_bin_dir)" || exit 1
    is_running || exit 1
    echo "$URL"
}

cmd_stop() {
    BIN="$(find_bin_dir)" || exit 0
    if is_running; then
        as_owner "$BIN/pg_ctl" stop -D "$DATA_DIR" -m fast -w >/dev/null
    fi
    rm -rf "$DATA_DIR"
}

cmd_restart() {
    BIN="$(find_bin_dir)" || die "PostgreSQL is not installed"
    is_running || die "not running"
    # immediate: no shutdown checkpoint, clients cut off mid-transaction, as when the server dies.
    as_owner "$BIN/pg_ctl" stop -D "$DATA_DIR" -m immediate -w >/dev/null
    start_server
    echo "$URL"
}

main() {
    # Serialize concurrent callers (parallel test sessions) so only one initializes the cluster.
    exec 9>"$LOCK_FILE"
    flock -w 120 9 || die "timed out waiting for $LOCK_FILE"
    case "${1:-start}" in
        start) cmd_start ;;
        status) cmd_status ;;
        stop) cmd_stop ;;
        restart) cmd_restart ;;
        *) die "usage: $0 [start|status|stop|restart]" ;;
    esac
}

main "$@"
