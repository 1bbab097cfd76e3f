"""What every store of the worker shares: where it lives, how long it keeps entries, and how it
seals them. The stores themselves are activities/message_store.py (SQLite, the default on one
machine), activities/pg_store.py (PostgreSQL, shared by a fleet) and activities/result_store.py.

- **Where.** `AGENT_STORE_URL=postgresql://user:password@host:port/database` (or libpq's
  `host=... user=... password=... dbname=...` form) puts the message store and the result store
  in that database, for every worker that is given it; unset, each is a SQLite file on the
  worker (`AGENT_MESSAGE_STORE`, `AGENT_RESULT_STORE`), created readable by its owner only.
  `AGENT_STORE_PASSWORD_FILE` names a file holding the password, for a URL that holds none.
- **Never shown whole.** The URL's password (in `user:password@`, in `?password=` or
  `?sslpassword=`, or as `password=` of the key=value form) goes into no message, log line or
  error: `redacted()` is the URL as the worker shows it, and `scrubbed()` takes the password out
  of any text, such as libpq's own messages, which quote parts of what they could not read.
- **How long.** `AGENT_STORE_RETENTION` (a duration: `7d`, `36h`, `90m`; 7 days by default): an
  entry unused for that long is deleted. The older `AGENT_STORE_RETENTION_HOURS` (a number of
  hours) still works; giving both is a configuration error, since one would be ignored.
- **Sealed.** With `AGENT_PAYLOAD_KEYS` (or `AGENT_PAYLOAD_KEYS_FILE`) set, each stored text is
  AES-GCM ciphertext under the first key, with that key's id; any listed key opens it, and the
  entry's reference is the associated data, so an entry moved under another reference does not
  open. The keys are the ones that encrypt the payloads in Temporal (payload_codec.py).

A malformed setting is an AgentConfigurationError, which fails a run rather than being retried;
the worker reads every setting before it serves anything, and stops in one line.
"""

from __future__ import annotations

import logging
import math
import os
import re
import secrets
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..encryption import payload_codec
from ..encryption.payload_codec import (
    KEYS_VARIABLE,
    NONCE_BYTES,
    TAG_BYTES,
    PayloadKey,
    PayloadKeyError,
)
from ..workflows.errors import AgentConfigurationError

logger = logging.getLogger(__name__)

STORE_URL_VARIABLE = "AGENT_STORE_URL"
PASSWORD_FILE_VARIABLE = "AGENT_STORE_PASSWORD_FILE"
"""A file holding the store's password, for a URL that holds none (docker-compose.yml)."""
RETENTION_VARIABLE = "AGENT_STORE_RETENTION"
LEGACY_RETENTION_VARIABLE = "AGENT_STORE_RETENTION_HOURS"
"""The retention in hours, as the SQLite stores read it before AGENT_STORE_RETENTION."""
DEFAULT_RETENTION_HOURS = 7 * 24.0

_UNIT_HOURS = {"s": 1 / 3600, "m": 1 / 60, "h": 1.0, "d": 24.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhd])")


def retention_hours_from_env(environ: Mapping[str, str] | None = None) -> float:
    """The retention the environment sets, in hours; AgentConfigurationError when it is
    malformed, not above 0, or set under both names."""
    env = os.environ if environ is None else environ
    text = env.get(RETENTION_VARIABLE, "").strip()
    legacy = env.get(LEGACY_RETENTION_VARIABLE, "").strip()
    if text and legacy:
        raise AgentConfigurationError(
            f"{RETENTION_VARIABLE} and {LEGACY_RETENTION_VARIABLE} are both set: keep "
            f"{RETENTION_VARIABLE} (e.g. {RETENTION_VARIABLE}=7d)"
        )
    if text:
        match = _DURATION.fullmatch(text.lower())
        hours = float(match[1]) * _UNIT_HOURS[match[2]] if match else 0.0
        if not 0 < hours < math.inf:
            raise AgentConfigurationError(
                f"{RETENTION_VARIABLE}={text!r}: expected a duration above 0 with its unit, "
                "such as 7d, 36h, 90m or 600s (default 7d)"
            )
        return hours
    if not legacy:
        return DEFAULT_RETENTION_HOURS
    try:
        hours = float(legacy)
    except ValueError:
        hours = 0.0
    if not 0 < hours < math.inf:
        raise AgentConfigurationError(
            f"{LEGACY_RETENTION_VARIABLE}={legacy!r}: expected a number of hours above 0 "
            f"(default {DEFAULT_RETENTION_HOURS:g}); or set {RETENTION_VARIABLE}=7d"
        )
    return hours


POSTGRES_SCHEMES = ("postgresql", "postgres")
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
"""The connection parameters that are secrets: masked wherever a store's URL is shown."""
MASK = "***"
UNREADABLE = "(the connection string, hidden: it cannot be read)"
"""What is shown of a key=value string that cannot be parsed: which part of it is the password
is then unknown, so none of it is shown."""
_STORE_URL_FORMS = (
    "postgresql://user:password@host:port/database, with a space or @ : / ? # % in the user or "
    "password percent-encoded (%20, %40...), or key=value pairs (host=... user=... "
    "password='two words' dbname=...)"
)


def store_url_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """`AGENT_STORE_URL` when it names a PostgreSQL database (a postgresql:// URL or libpq's
    key=value string), None when it is unset (the SQLite files); AgentConfigurationError for
    anything else, whose message holds none of the password."""
    env = os.environ if environ is None else environ
    url = env.get(STORE_URL_VARIABLE, "").strip()
    if not url:
        return None
    if _is_url(url) and urlsplit_or_none(url) is None:
        problem = "it is not a URL"
    elif _is_url(url) and _scheme(url) not in POSTGRES_SCHEMES:
        problem = "it is not a PostgreSQL URL"
    elif _is_url(url) and any(c in _url_password(url) for c in "@/?#"):
        # libpq would end the password there, and show the rest of it as the host or port.
        problem = "its password holds an @ / ? or # that is not percent-encoded"
    elif _parameters(url) is None:
        problem = "libpq cannot read it"
    else:
        return _with_password_file(url, env)
    # libpq's own message is left out: it quotes the part it could not read, which may be part
    # of the password.
    raise AgentConfigurationError(
        f"{STORE_URL_VARIABLE}={redacted(url)!r}: {problem}; expected {_STORE_URL_FORMS} "
        "(unset: SQLite files on the worker)"
    )


def _with_password_file(url: str, env: Mapping[str, str]) -> str:
    """The URL, with the password of AGENT_STORE_PASSWORD_FILE when that is set (as libpq's
    key=value string then)."""
    path = env.get(PASSWORD_FILE_VARIABLE, "").strip()
    if not path:
        return url
    if secrets_of(url):
        raise AgentConfigurationError(
            f"{STORE_URL_VARIABLE} holds a password and {PASSWORD_FILE_VARIABLE} is set: keep "
            "one of them"
        )
    try:
        password = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise AgentConfigurationError(
            f"{PASSWORD_FILE_VARIABLE}: cannot read {path}: {reason}"
        ) from None
    if not password:
        raise AgentConfigurationError(f"{PASSWORD_FILE_VARIABLE}: {path} is empty")
    from psycopg.conninfo import make_conninfo

    return make_conninfo(url, password=password)


def redacted(url: str) -> str:
    """The store's connection string without its secrets, for messages and logs: the password
    of `user:password@` and the values of `password=` and `sslpassword=` (query parameters of a
    URL, or pairs of the key=value form) become ***. A key=value string that cannot be parsed is
    not shown at all."""
    if _is_url(url):
        scheme, _, rest = url.partition("://")
        userinfo, at, after = rest.rpartition("@")
        if at and ":" in userinfo:
            # Up to the last @ of the whole URL: a / ? or @ in the password would end a
            # reading that stops at the first, and show the rest of it.
            rest = f"{userinfo.partition(':')[0]}:{MASK}@{after}"
        return _SECRET_QUERY.sub(rf"\1{MASK}", f"{scheme}://{rest}")
    parameters = _parameters(url)
    if parameters is None:
        return UNREADABLE
    shown = _KEY_VALUE.sub(_masked_key_value, url)
    if any(secret in shown for secret in secrets_of(url)):  # read otherwise than libpq reads it
        from psycopg.conninfo import make_conninfo

        masked = {k: MASK if k in SECRET_PARAMETERS else v for k, v in parameters.items()}
        shown = make_conninfo(**masked)
    return shown


_KEY_VALUE = re.compile(r"(\w+)(\s*=\s*)('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)+)")
"""One `key = value` pair of libpq's key=value form; the value quoted, or up to a space."""


def _masked_key_value(pair: re.Match[str]) -> str:
    masked = pair[1].lower() in SECRET_PARAMETERS
    return f"{pair[1]}{pair[2]}{MASK}" if masked else pair[0]


def secrets_of(url: str) -> list[str]:
    """Every secret the connection string holds, as written and as decoded, longest first."""
    found: set[str] = set()
    if _is_url(url):
        first_at = url.partition("://")[2].partition("@")[0]
        found |= {_url_password(url), first_at.partition(":")[2]}
        parts = urlsplit_or_none(url)
        if parts is not None and parts.password:
            found.add(parts.password)
        found |= {pair[2] for pair in _SECRET_QUERY.finditer(url)}
    else:
        # As written (quoted or not), and below as libpq reads it, when it can.
        found |= {
            pair[3].strip("'")
            for pair in _KEY_VALUE.finditer(url)
            if pair[1].lower() in SECRET_PARAMETERS
        }
    for key, value in (_parameters(url) or {}).items():
        if key in SECRET_PARAMETERS:
            found.add(value)
    found |= {unquote(secret) for secret in found}
    return sorted((secret for secret in found if secret), key=len, reverse=True)


def scrubbed(text: str, url: str) -> str:
    """`text` (an error's message, a log line) with every secret of `url` replaced by ***:
    libpq quotes back the part of a connection string it could not read."""
    for secret in secrets_of(url):
        text = text.replace(secret, MASK)
    return text


def database_key(url: str) -> str:
    """The connection string without its secrets, in one canonical form: which database, on
    which server, as which user. Two strings that differ only in their password (a rotated
    AGENT_STORE_PASSWORD_FILE) have the same key, so they share a pool. `url` itself when libpq
    cannot read it: a key only, never shown."""
    parameters = _parameters(url)
    if parameters is None:
        return url
    from psycopg.conninfo import make_conninfo

    return make_conninfo(
        **{k: v for k, v in sorted(parameters.items()) if k not in SECRET_PARAMETERS}
    )


def _url_password(url: str) -> str:
    """The password of a URL's userinfo, up to the last @ of the URL ('' for none)."""
    userinfo = url.partition("://")[2].rpartition("@")[0]
    return userinfo.partition(":")[2]


def _is_url(url: str) -> bool:
    """A URL, not libpq's key=value string (whose first `=` comes before any `://`)."""
    return "://" in url.partition("=")[0] or "=" not in url


def _scheme(url: str) -> str:
    parts = urlsplit_or_none(url)
    return "" if parts is None else parts.scheme.lower()


def urlsplit_or_none(url: str) -> SplitResult | None:
    try:
        return urlsplit(url)
    except ValueError:  # a malformed IPv6 host, a port that is not a number
        return None


_SECRET_QUERY = re.compile(r"([?&](?:ssl)?password=)([^&#]*)", re.IGNORECASE)
"""A URL's `password=` or `sslpassword=` query parameter, and its value."""


def _parameters(url: str) -> dict[str, str] | None:
    """libpq's reading of the connection string, None when it cannot read it. psycopg is
    imported only here, once a URL is set: a worker on SQLite does not load it."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        return {key: str(value) for key, value in conninfo_to_dict(url).items()}
    except ProgrammingError:
        return None


def configured_keys() -> list[PayloadKey]:
    """The payload keys the environment sets ([] for none); AgentConfigurationError when they are
    malformed."""
    try:
        return payload_codec.keys_from_env() or []
    except PayloadKeyError as error:
        raise AgentConfigurationError(f"the worker's stores cannot be opened: {error}") from None


def configuration() -> tuple[str, ...]:
    """Everything a store is opened with, as the environment says now: a store opened under one
    configuration is reused while it holds (tests change the environment)."""
    env = os.environ
    return (
        env.get(payload_codec.KEYS_VARIABLE, ""),
        env.get(payload_codec.KEYS_FILE_VARIABLE, ""),
        env.get(RETENTION_VARIABLE, ""),
        env.get(LEGACY_RETENTION_VARIABLE, ""),
    )


_SEALED = b"\x01"
"""The first byte of a sealed entry: the format's version. Then the key id, a NUL, the nonce and
the ciphertext."""


class StoreCipher:
    """AES-GCM with the payload key ring: the first key seals, every key opens what names it."""

    def __init__(self, keys: Sequence[PayloadKey]) -> None:
        if not keys:
            raise PayloadKeyError("a store cipher needs at least one key")
        self.key_id = keys[0].id
        self._sealer = AESGCM(keys[0].key)
        self._openers = {key.id: AESGCM(key.key) for key in keys}

    def seal(self, ref: str, text: str) -> bytes:
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = self._sealer.encrypt(nonce, text.encode(), ref.encode())
        return _SEALED + self.key_id.encode() + b"\0" + nonce + sealed

    def open(self, ref: str, sealed: bytes) -> str:
        """The text; raises PayloadKeyError when this key ring cannot open it."""
        if not sealed.startswith(_SEALED):
            raise PayloadKeyError("it is in a format this version does not know")
        key_id, opener, body = self._parts(sealed)
        if opener is None:
            raise PayloadKeyError(f"key id {key_id!r} is not in {KEYS_VARIABLE}")
        if len(body) < NONCE_BYTES + TAG_BYTES:
            # AESGCM refuses a nonce under 8 bytes with a bare ValueError: a failed read, not a
            # miss.
            raise PayloadKeyError(f"it has {len(body)} bytes after the key id: it was cut short")
        try:
            plain = opener.decrypt(body[:NONCE_BYTES], body[NONCE_BYTES:], ref.encode())
        except InvalidTag:
            raise PayloadKeyError(
                f"the key of id {key_id!r} does not open it (another key of that id, or the "
                "entry was altered)"
            ) from None
        return plain.decode()

    def _parts(self, sealed: bytes) -> tuple[str, AESGCM | None, bytes]:
        key_id, _, body = sealed[len(_SEALED) :].partition(b"\0")
        name = key_id.decode(errors="replace")
        return name, self._openers.get(name), body


def sealed_key_id(value: bytes) -> str:
    """The key id a sealed entry names."""
    return value[len(_SEALED) :].partition(b"\0")[0].decode(errors="replace")


class Sealing:
    """Sealing and opening for one store: `where` names it in the warning an entry that cannot
    be opened gives, once per key id."""

    def __init__(self, keys: Sequence[PayloadKey], where: str) -> None:
        self.cipher = StoreCipher(keys) if keys else None
        self.where = where
        self._warned: set[str] = set()

    def seal(self, ref: str, text: str) -> bytes | None:
        """The sealed entry, or None without keys (the text is then stored as it is)."""
        return None if self.cipher is None else self.cipher.seal(ref, text)

    def open(self, ref: str, value: Any, sealed: bool) -> str | None:
        """The text of an entry (`sealed`: written with keys), or None when it cannot be opened
        here: a miss."""
        if not sealed:
            return bytes(value).decode() if isinstance(value, bytes | memoryview) else str(value)
        value = bytes(value)
        try:
            if self.cipher is None:
                raise PayloadKeyError(f"{KEYS_VARIABLE} is not set")
            return self.cipher.open(ref, value)
        except PayloadKeyError as error:
            key_id = sealed_key_id(value)
            if key_id not in self._warned:
                self._warned.add(key_id)
                logger.warning(
                    "%s: an entry sealed with key id %r cannot be opened (%s): such entries "
                    "count as misses",
                    self.where,
                    key_id,
                    error,
                )
            return None


TOUCH_EVERY_SECONDS = 3600.0
"""A use of an entry is written at most this often (reading one counts as a use)."""
RECENT_CHAINS = 256
"""Chains a store keeps in memory, the most recently used."""


class RecentChains:
    """The chains a message store wrote or read lately, in memory, each with when its use was
    last written: the next link of a chain finds its prefix here without a walk of the table.
    The same for SQLite and PostgreSQL; callers hold their store's lock."""

    def __init__(self) -> None:
        self._chains: OrderedDict[str, tuple[list[str], float]] = OrderedDict()

    def known(self, ref: str) -> list[str] | None:
        kept = self._chains.get(ref)
        return None if kept is None else kept[0]

    def get(self, ref: str) -> tuple[list[str], float] | None:
        """The chain and when its use was last written, now the most recently used."""
        kept = self._chains.get(ref)
        if kept is not None:
            self._chains.move_to_end(ref)
        return kept

    def keep(self, ref: str, chain: list[str], touched: float) -> None:
        self._chains[ref] = (chain, touched)
        self._chains.move_to_end(ref)
        while len(self._chains) > RECENT_CHAINS:
            self._chains.popitem(last=False)

    def clear(self) -> None:
        self._chains.clear()
