"""One TLS context for every provider call of this process.

Each model call builds its SDK client and closes it after (nothing is bound to an event loop),
and each client used to build its own TLS context: loading the CA bundle
(`load_verify_locations`) took 47 ms of CPU a call, on the event loop, 62% of the worker's CPU
in bench/admission.py. The context is built once, the way the SDKs build theirs (httpx2's
`create_ssl_context`, which reads SSL_CERT_FILE and SSL_CERT_DIR), and shared: one SSLContext
serves any number of connections.
"""

from __future__ import annotations

import functools
import ssl

import httpx2


@functools.cache
def tls_context() -> ssl.SSLContext:
    return httpx2.create_ssl_context()
