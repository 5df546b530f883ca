"""moto's S3 server for the tests, with the two things `python -m moto.server` lacks: a port
chosen by the kernel with no race, and injected faults. Run by the s3 environment's python
(scripts/layered-env.sh s3-env), never imported by the tests: tests/e2e/s3_server.py
(stdlib only) starts it and talks to it.

  python moto_s3_server.py --port-file FILE --fault-file FILE [--host 127.0.0.1] [--port 0]

It binds HOST:PORT (0: any free port) before anything else can take it, then writes the
bound port to --port-file (atomically: a reader sees the whole number or no file) and
serves until SIGTERM. While --fault-file exists and holds an HTTP status (e.g. "503"),
every request is answered with that status and an S3-style XML error, without reaching
moto (whose data is kept: it lives in this process's memory); once the file is removed,
requests reach moto again. The file is read on each request, so a switch takes effect on
the next one.
"""

from __future__ import annotations

import argparse
import ctypes
import http
import os
import signal
import sys
from typing import Any, Callable, Iterable
from xml.sax.saxutils import escape

try:
    from moto.moto_server.werkzeug_app import (DomainDispatcherApplication, MotoRequestHandler,
                                               create_backend_app)
    import werkzeug.serving
    from werkzeug.serving import make_server
except ImportError as e:  # the wrong python: name the one to use
    sys.exit(f"moto_s3_server.py: {e}: run it with the s3 environment's python "
             f"(scripts/layered-env.sh s3-env | tail -n 1), not {sys.executable}")

# S3's own codes for the statuses a test is likely to inject, so that clients classify
# them as they would a real S3's (503 SlowDown: retry with backoff).
S3_CODES = {500: "InternalError", 503: "SlowDown", 403: "AccessDenied", 404: "NoSuchKey",
            400: "BadRequest", 429: "SlowDown"}


def read_fault(path: str) -> int | None:
    """The status the fault file asks for, or None without one. Anything but a number from
    400 to 599 is answered with 500 (and said in the log), never ignored."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    try:
        status = int(text.split()[0])
    except (ValueError, IndexError):
        status = 0
    if not 400 <= status <= 599:
        print(f"moto_s3_server: {path} holds {text!r}, not a status from 400 to 599: answering 500",
              file=sys.stderr, flush=True)
        return 500
    return status


class FaultSwitch:
    """WSGI middleware: moto's app, or the fault file's status for every request."""

    def __init__(self, app: Callable[..., Iterable[bytes]], fault_file: str) -> None:
        self.app = app
        self.fault_file = fault_file

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status = read_fault(self.fault_file)
        if status is None:
            return self.app(environ, start_response)
        # Read the request's body first: answering an upload without reading it would reset
        # the connection under the client, which would see that instead of the status.
        stream = environ["wsgi.input"]
        if environ.get("wsgi.input_terminated"):
            while stream.read(1 << 16):
                pass
        else:
            left = int(environ.get("CONTENT_LENGTH") or 0)
            while left > 0:
                chunk = stream.read(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = "Injected Fault"
        code = S3_CODES.get(status, phrase.replace(" ", ""))
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{escape(code)}</Code>'
                f"<Message>injected by the test ({escape(self.fault_file)})</Message>"
                f"<RequestId>injected</RequestId></Error>").encode()
        start_response(f"{status} {phrase}", [("Content-Type", "application/xml"),
                                               ("Content-Length", str(len(body)))])
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]


def die_with_parent() -> None:
    """SIGKILL when the test that started us dies (even SIGKILLed, or while we are stopped
    by SIGSTOP), so no server outlives its test."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the test's cleanup still stops us
    if os.getppid() == 1:  # the parent died before prctl
        os._exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port, chosen by the kernel")
    parser.add_argument("--port-file", required=True, help="where the bound port is written")
    parser.add_argument("--fault-file", required=True, help="an HTTP status in it fails every request")
    args = parser.parse_args()
    die_with_parent()

    # The request lines go to a log file: without ANSI colours (a module switch of werkzeug's).
    werkzeug.serving._log_add_style = False
    app = FaultSwitch(DomainDispatcherApplication(create_backend_app), args.fault_file)
    # Bound here, before the port is known to anyone: no other process can take it between
    # choosing and binding (as with `moto.server -p` and a port picked by the caller).
    server = make_server(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)
    port = server.socket.getsockname()[1]
    # moto builds some URLs in its answers from MOTO_PORT (as `python -m moto.server` sets it).
    os.environ["MOTO_PORT"] = str(port)

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tmp = f"{args.port_file}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, args.port_file)
    print(f"moto_s3_server: moto serving S3 on http://{args.host}:{port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
