"""Payloads sealed at rest: the AES-GCM codec workers and clients share (payload_codec.py) and
the codec server the Web UI decrypts through (codec_server.py)."""

from __future__ import annotations

if not __name__.startswith("durable_agent."):
    # This folder imported by a bare name from the checkout would load a second copy of each
    # module (a `@tool` registered through it would register nowhere).
    raise ImportError(f"this folder is durable_agent.{__name__}: import durable_agent.{__name__}")
