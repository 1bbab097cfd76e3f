#!/bin/sh
# One-shot step of docker-compose.yml (service payload-key, this project's image): make the
# stack's payload key and codec token on first start, so that payloads are encrypted from the
# first run. A file that is already there is kept: the key decrypts every run written with it.
#
#   payload-key.sh           make what is missing, keep the rest
#   payload-key.sh rotate    put a new key first: it encrypts from the next worker start on,
#                            and the old ones stay listed, to read the runs written with them
#
# Both files are readable by their owner only (the image's `agent` user, uid 10001).
set -eu

KEYS_FILE="${AGENT_PAYLOAD_KEYS_FILE:-/keys/payload-keys}"
TOKEN_FILE="${AGENT_CODEC_TOKEN_FILE:-/keys/codec-token}"
PYTHON="${PYTHON:-python}"
umask 077

new_key() {
    # id k<date>-<time>: two rotations on one day still get two ids.
    "$PYTHON" -c 'from durable_agent.encryption import payload_codec; import time
print(payload_codec.new_key_pair(time.strftime("k%Y%m%d-%H%M%S", time.gmtime())))'
}

# write FILE TEXT: TEXT and a newline into FILE, whole or not at all. (No pipes: under `set -e` a
# pipeline's status is its last command's, so a failed generator would leave an empty file.)
write() {
    printf '%s\n' "$2" >"$1.tmp"
    mv "$1.tmp" "$1"
}

case "${1:-ensure}" in
ensure)
    if [ -s "$KEYS_FILE" ]; then
        echo "payload key: keeping $KEYS_FILE"
    else
        key="$(new_key)"
        write "$KEYS_FILE" "$key"
        echo "payload key: made $KEYS_FILE"
    fi
    ;;
rotate)
    if [ ! -s "$KEYS_FILE" ]; then
        echo "payload key: $KEYS_FILE is missing; start the stack once first" >&2
        exit 1
    fi
    key="$(new_key)"
    old="$(cat "$KEYS_FILE")"
    write "$KEYS_FILE" "$key
$old"
    echo "payload key: a new key is first in $KEYS_FILE; restart the workers and the codec server"
    ;;
*)
    echo "usage: payload-key.sh [ensure|rotate]" >&2
    exit 2
    ;;
esac

if [ -s "$TOKEN_FILE" ]; then
    echo "codec token: keeping $TOKEN_FILE"
else
    token="$("$PYTHON" -c 'import secrets; print(secrets.token_hex(32))')"
    write "$TOKEN_FILE" "$token"
    echo "codec token: made $TOKEN_FILE"
fi

# The workers would refuse a malformed file at start; say so here, where it was made.
AGENT_PAYLOAD_KEYS="" AGENT_PAYLOAD_KEYS_FILE="$KEYS_FILE" "$PYTHON" -c 'import sys; from durable_agent.encryption import payload_codec
try:
    keys = payload_codec.keys_from_env()
except payload_codec.PayloadKeyError as error:
    sys.exit(f"payload key: {error}")
print("payload key: encrypting with key id", keys[0].id)'
