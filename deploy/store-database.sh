#!/bin/sh
# One-shot step of docker-compose.yml (service store-database, the postgres image): make the
# workers' own database and user in the PostgreSQL that Temporal uses, so that the workers' stores
# (AGENT_STORE_URL) are apart from Temporal's tables and Temporal's admin password stays out of
# the workers. Safe to run on every `up`: what exists is kept, and the user's password is set to
# AGENT_DB_PASSWORD each time (change it there, then `docker compose up -d`).
#
# Connects as the server's admin (PGHOST, PGUSER, PGPASSWORD, as psql reads them).
set -eu

: "${AGENT_DB_NAME:=agent}"
: "${AGENT_DB_USER:=agent}"
: "${AGENT_DB_PASSWORD:?set AGENT_DB_PASSWORD}"

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
