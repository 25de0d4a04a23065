# Shell functions shared by corral's PostgreSQL scripts (sourced, not run): src/corral/cli/postgres_server.sh
# (a `corral up --controllers N` cluster's server) and scripts/pg-test-server.sh (the tests' throwaway one).
# The sourcing script defines die(), and BIN and DATA_DIR before it calls is_running.

find_bin_dir() {
    # Newest installed major version; Debian puts the server binaries outside PATH.
    local dir
    dir="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
    [[ -x "$dir/initdb" ]] && echo "$dir"
}

install_postgres() {
    [[ "$(id -u)" -eq 0 ]] || die "PostgreSQL is not installed and we are not root: install the 'postgresql' package"
    echo "installing postgresql with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
}

# The server refuses to run as root, so as root every server command runs as 'postgres'.
as_owner() {
    if [[ "$(id -u)" -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

is_running() {
    [[ -f "$DATA_DIR/PG_VERSION" ]] && as_owner "$BIN/pg_ctl" status -D "$DATA_DIR" >/dev/null 2>&1
}
