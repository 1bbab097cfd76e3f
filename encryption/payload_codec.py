"""Encryption at rest: the data converter of every client and worker, with AES-GCM when keys are
configured, so transcripts, tool arguments and results are ciphertext in the server's database.

Keys come from `AGENT_PAYLOAD_KEYS` (`id=base64key` pairs, comma-separated) or from the file that
`AGENT_PAYLOAD_KEYS_FILE` names (the same pairs, one a line or comma-separated; `#` starts a
comment). The first key encrypts; every key listed decrypts the payloads that name its id, so a
rotation is "new,old": runs started before it still read. Keys are 16, 24 or 32 bytes (AES-128,
-192 or -256); `python payload_codec.py` prints a fresh pair.

Each payload is sealed with associated data that names this format and the key id, and says so
in its metadata (`encryption-aad: v1`), so a payload is opened the way it was sealed: those from
before associated data (no such metadata) still read, and moving the marker on or off a payload
makes it fail to decrypt. Releases before associated data cannot read the new payloads: while a
fleet still runs one, set `AGENT_PAYLOAD_AAD=off` on the new releases (they read both and write
the old form), and remove it once every worker, client and codec server is upgraded.

What the codec covers (temporalio's payload visitor): workflow and activity inputs and results,
query and update payloads, memos, activity summaries (user metadata) and, with the failure
converter below, failure messages and stack traces. Search attributes are never encoded: the
workflow keeps them free of content (AgentStatus, AgentStep).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)

from ..workflows.payloads import RefusesUndecodableInput

AGENT_DATA_CONVERTER = DataConverter(payload_converter_class=RefusesUndecodableInput)
"""temporalio.contrib.pydantic's converter, under which a run's input that does not fit the
contract fails the run (workflows/payloads.py); the encryption below goes on top of it."""

KEYS_VARIABLE = "AGENT_PAYLOAD_KEYS"
KEYS_FILE_VARIABLE = "AGENT_PAYLOAD_KEYS_FILE"
ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
AAD_METADATA = "encryption-aad"
AAD_VERSION = b"v1"
AAD_VARIABLE = "AGENT_PAYLOAD_AAD"
NONCE_BYTES = 12
TAG_BYTES = 16
"""AES-GCM's authentication tag, after the ciphertext: a sealed payload has at least a nonce
and a tag."""
_KEY_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


class PayloadKeyError(ValueError):
    """The key configuration is malformed, or a payload names a key that is not configured.

    The message is one line and never holds key material."""


@dataclasses.dataclass(frozen=True)
class PayloadKey:
    id: str
    key: bytes = dataclasses.field(repr=False)


def parse_keys(text: str, source: str = KEYS_VARIABLE) -> list[PayloadKey]:
    """`id=base64key` pairs separated by commas or newlines; the first one encrypts."""
    keys: list[PayloadKey] = []
    entries = [
        entry.strip()
        for line in text.splitlines()
        for entry in line.split("#", 1)[0].split(",")
        if entry.strip()
    ]
    if not entries:
        raise PayloadKeyError(f"{source}: no keys; expected id=base64key pairs, comma-separated")
    for number, entry in enumerate(entries, start=1):
        key_id, equals, encoded = entry.partition("=")
        key_id, encoded = key_id.strip(), encoded.strip()
        if not equals or not key_id:
            raise PayloadKeyError(f"{source}: entry {number} is not id=base64key")
        if not _KEY_ID.fullmatch(key_id):
            raise PayloadKeyError(
                f"{source}: key id {key_id[:64]!r} may only have letters, digits and ._:- "
                "(at most 64)"
            )
        try:
            key = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise PayloadKeyError(f"{source}: the key of id {key_id!r} is not base64") from None
        if len(key) not in (16, 24, 32):
            raise PayloadKeyError(
                f"{source}: the key of id {key_id!r} is {len(key)} bytes; AES-GCM needs 16, 24 "
                "or 32"
            )
        if any(known.id == key_id for known in keys):
            raise PayloadKeyError(f"{source}: key id {key_id!r} appears twice")
        keys.append(PayloadKey(key_id, key))
    return keys


def keys_from_env(environ: Mapping[str, str] | None = None) -> list[PayloadKey] | None:
    """The configured keys, or None when encryption is off (neither variable set)."""
    env = os.environ if environ is None else environ
    inline = env.get(KEYS_VARIABLE, "").strip()
    path = env.get(KEYS_FILE_VARIABLE, "").strip()
    if inline and path:
        raise PayloadKeyError(f"set {KEYS_VARIABLE} or {KEYS_FILE_VARIABLE}, not both")
    if inline:
        return parse_keys(inline)
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or type(error).__name__
            raise PayloadKeyError(f"{KEYS_FILE_VARIABLE}: cannot read {path}: {reason}") from None
        return parse_keys(text, f"{KEYS_FILE_VARIABLE} ({path})")
    return None


def associated_data_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether new payloads are sealed with associated data: yes unless AGENT_PAYLOAD_AAD=off
    (for a fleet that still runs a release that cannot read them)."""
    env = os.environ if environ is None else environ
    value = env.get(AAD_VARIABLE, "").strip().lower()
    if value in ("", "on"):
        return True
    if value == "off":
        return False
    raise PayloadKeyError(f"{AAD_VARIABLE} is {value[:20]!r}; expected on or off")


def associated_data(key_id: str) -> bytes:
    """What a v1 payload is sealed with besides its contents: the format and the key id."""
    return b"durable-agent-loop payload v1 key " + key_id.encode()


class EncryptionCodec(PayloadCodec):
    """AES-GCM over each whole serialized payload, with the key id in the metadata, and the
    associated data of `associated_data` unless told otherwise.

    Decoding passes payloads without the `binary/encrypted` encoding through unchanged: runs
    started before encryption was turned on still read; and opens payloads without the
    associated-data marker without associated data, as they were sealed."""

    def __init__(self, keys: Sequence[PayloadKey], *, associated_data: bool = True) -> None:
        if not keys:
            raise PayloadKeyError("an encryption codec needs at least one key")
        self.key_id = keys[0].id
        self.associated_data = associated_data
        self._encryptor = AESGCM(keys[0].key)
        self._decryptors = {k.id: AESGCM(k.key) for k in keys}

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        nonce = secrets.token_bytes(NONCE_BYTES)
        metadata = {"encoding": ENCODING, KEY_ID_METADATA: self.key_id.encode()}
        aad = None
        if self.associated_data:
            aad = associated_data(self.key_id)
            metadata[AAD_METADATA] = AAD_VERSION
        sealed = self._encryptor.encrypt(nonce, payload.SerializeToString(), aad)
        return Payload(metadata=metadata, data=nonce + sealed)

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
        decryptor = self._decryptors.get(key_id)
        if decryptor is None:
            raise PayloadKeyError(
                f"a payload is encrypted with key id {key_id!r}, which is not configured "
                f"(known: {', '.join(self._decryptors)}); add it back to {KEYS_VARIABLE} after "
                "the new key to read runs from before a rotation"
            )
        marker = payload.metadata.get(AAD_METADATA)
        if marker is not None and marker != AAD_VERSION:
            raise PayloadKeyError(
                f"a payload with key id {key_id!r} is sealed with associated data "
                f"{marker[:16].decode(errors='replace')!r}, which this release does not know"
            )
        aad = None if marker is None else associated_data(key_id)
        data = payload.data
        if len(data) < NONCE_BYTES + TAG_BYTES:
            # Checked here: AESGCM refuses a nonce under 8 bytes with a bare ValueError, which
            # reads as a bug of this code rather than a corrupt payload.
            raise PayloadKeyError(
                f"a payload with key id {key_id!r} has {len(data)} bytes, too few for a nonce "
                "and a tag: it was cut short or altered"
            )
        try:
            plain = decryptor.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], aad)
        except InvalidTag:
            raise PayloadKeyError(
                f"a payload with key id {key_id!r} does not decrypt: the key configured for "
                "that id is not the one that encrypted it, or the payload was altered"
            ) from None
        try:
            return Payload.FromString(plain)
        except DecodeError:
            raise PayloadKeyError(
                f"a payload with key id {key_id!r} decrypts to something that is not a "
                "payload: it was sealed by something other than this codec"
            ) from None


def data_converter(
    environ: Mapping[str, str] | None = None, *, keys: Iterable[PayloadKey] | None = None
) -> DataConverter:
    """The agent's pydantic converter (AGENT_DATA_CONVERTER); with keys (given, or from the
    environment) also the encryption codec and a failure converter that moves failure messages
    and stack traces into the encrypted attributes. Raises PayloadKeyError on a malformed
    configuration."""
    configured = list(keys) if keys is not None else keys_from_env(environ)
    if not configured:
        return AGENT_DATA_CONVERTER
    codec = EncryptionCodec(configured, associated_data=associated_data_from_env(environ))
    return dataclasses.replace(
        AGENT_DATA_CONVERTER,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def new_key_pair(key_id: str) -> str:
    """`id=base64key` with a fresh 256-bit key."""
    return f"{key_id}={base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()}"


if __name__ == "__main__":
    import datetime

    print(new_key_pair(datetime.date.today().strftime("k%Y%m%d")))
