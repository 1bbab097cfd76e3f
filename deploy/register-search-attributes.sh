#!/bin/sh
# One-shot step of docker-compose.yml (service register-search-attributes, admin-tools image):
# wait for the Temporal server and its namespace, then register the search attributes that
# AgentWorkflow sets at every step. Idempotent: an attribute that already exists with the same
# type is fine, and the final check against `search-attribute list` is what decides success.
set -eu

ADDRESS="${TEMPORAL_ADDRESS:-temporal:7233}"
NAMESPACE="${TEMPORAL_NAMESPACE:-default}"
WAIT_SECONDS="${WAIT_SECONDS:-300}"

waited=0
# The server answers before auto-setup has created the default namespace: wait for both.
until temporal operator namespace describe --address "$ADDRESS" --namespace "$NAMESPACE" \
    >/dev/null 2>&1; do
    if [ "$waited" -ge "$WAIT_SECONDS" ]; then
        echo "namespace $NAMESPACE not reachable at $ADDRESS after ${WAIT_SECONDS}s" >&2
        exit 1
    fi
    echo "waiting for Temporal at $ADDRESS (namespace $NAMESPACE)..."
    sleep 2
    waited=$((waited + 2))
done

if ! temporal operator search-attribute create --address "$ADDRESS" --namespace "$NAMESPACE" \
    --name AgentStatus --type Keyword \
    --name AgentStep --type Int \
    --name AgentCostUsd --type Double \
    --name AgentError --type Keyword \
    --name AgentForkedFrom --type Keyword; then
    # Some server versions answer "already exists" for an attribute that is already there.
    echo "create reported an error (already registered?): checking the namespace's list" >&2
fi

# has NAME TYPE: the list shows NAME with TYPE ("Keyword" in the table; the JSON form says
# INDEXED_VALUE_TYPE_KEYWORD), both matched as whole words.
has() {
    printf '%s\n' "$attributes" \
        | grep -Ei "(^|[^a-z0-9_])$1([^a-z0-9_]|\$)" \
        | grep -Eiq "(^|[^a-z])$2([^a-z]|\$)"
}

attributes="$(temporal operator search-attribute list --address "$ADDRESS" --namespace "$NAMESPACE")"
missing=""
has AgentStatus keyword || missing="$missing AgentStatus(Keyword)"
has AgentStep int || missing="$missing AgentStep(Int)"
has AgentCostUsd double || missing="$missing AgentCostUsd(Double)"
has AgentError keyword || missing="$missing AgentError(Keyword)"
has AgentForkedFrom keyword || missing="$missing AgentForkedFrom(Keyword)"
if [ -n "$missing" ]; then
    echo "search attributes missing or of another type in $NAMESPACE:$missing" >&2
    printf '%s\n' "$attributes" >&2
    exit 1
fi
echo "search attributes AgentStatus (Keyword), AgentStep (Int), AgentCostUsd (Double), AgentError (Keyword) and AgentForkedFrom (Keyword) are registered in $NAMESPACE"
