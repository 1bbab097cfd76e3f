#!/bin/sh
# One-shot step of docker-compose.yml (service db-passwords, the postgres image, as root): make
# the stack's two database passwords on first start, as payload-key.sh makes the payload key, so
# that no stack runs with a password written in the repository:
#
#   temporal-db-password   the PostgreSQL admin's (Temporal's tables): POSTGRES_PASSWORD
#   agent-db-password      the workers' own user, which owns their stores: AGENT_DB_PASSWORD
#
# A file that is already there is kept. A password set on the host (the variable, non-empty)
# replaces it: the postgres image uses POSTGRES_PASSWORD only when it first makes its data,
# while store-database sets the agent user's password on every `up`.
#
# The files are read by three users (postgres, temporal and the workers' agent user, each its
# image's own uid), so they are 0444 on a volume that only the services that need a password
# mount, read-only; nothing prints a password.
set -eu

DIR="${DB_SECRETS_DIR:-/db-secrets}"
umask 022

new_password() {
    # 16 random bytes as 32 hex digits: safe in a URL and in a shell word, no quoting needed.
    # (Two steps, not a pipe: under `set -e` a pipeline's status is its last command's.)
    bytes="$(od -An -N16 -tx1 /dev/urandom)"
    printf '%s' "$bytes" | tr -d ' \n'
}

# ensure NAME HOST_VALUE
ensure() {
    file="$DIR/$1"
    if [ -n "$2" ]; then
        value="$2"
        what="set from the host's variable"
    elif [ -s "$file" ]; then
        echo "$1: keeping $file"
        return
    else
        value="$(new_password)"
        what="made"
        if [ "${#value}" -ne 32 ]; then
            echo "$1: could not read 16 random bytes from /dev/urandom" >&2
            exit 1
        fi
    fi
    printf '%s\n' "$value" >"$file.tmp"
    chmod 0444 "$file.tmp"
    mv -f "$file.tmp" "$file"
    echo "$1: $what $file"
}

mkdir -p "$DIR"
ensure temporal-db-password "${POSTGRES_PASSWORD:-}"
ensure agent-db-password "${AGENT_DB_PASSWORD:-}"
