#!/bin/sh
# One-shot step of docker-compose.yml (service store-database, the postgres image): make the
# workers' own database and user in the PostgreSQL that Temporal uses, so that the workers' stores
# (AGENT_STORE_URL) are apart from Temporal's tables and Temporal's admin password stays out of
# the workers. Safe to run on every `up`: what exists is kept, and the user's password is set to
# AGENT_DB_PASSWORD each time (change it on the host, then `docker compose up -d`).
#
# Connects as the server's admin (PGHOST, PGUSER, PGPASSWORD, as psql reads them). In the stack
# both passwords come from files that db-passwords.sh made: PGPASSWORD_FILE and
# AGENT_DB_PASSWORD_FILE, read here when set.
set -eu

if [ -n "${PGPASSWORD_FILE:-}" ]; then
    PGPASSWORD="$(cat "$PGPASSWORD_FILE")"
    export PGPASSWORD
fi
if [ -n "${AGENT_DB_PASSWORD_FILE:-}" ]; then
    AGENT_DB_PASSWORD="$(cat "$AGENT_DB_PASSWORD_FILE")"
fi
: "${AGENT_DB_NAME:=agent}"
: "${AGENT_DB_USER:=agent}"
: "${AGENT_DB_PASSWORD:?set AGENT_DB_PASSWORD or AGENT_DB_PASSWORD_FILE}"

psql --no-psqlrc --quiet -v ON_ERROR_STOP=1 --dbname postgres \
    -v db="$AGENT_DB_NAME" -v user="$AGENT_DB_USER" -v password="$AGENT_DB_PASSWORD" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'user')
    WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user') \gexec
ALTER ROLE :"user" WITH LOGIN PASSWORD :'password';
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
    WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \gexec
-- Only its owner (and the admin) may connect: not Temporal's user, were it another.
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
SQL
echo "store database: $AGENT_DB_NAME, owned by $AGENT_DB_USER"
