# SPDX-License-Identifier: Apache-2.0
"""The S3 harness itself (s3_harness.py): SeaweedFS stores and serves ranges, checks signatures,
and the proxy forwards signed requests unchanged or injects the faults it is told to."""
import hashlib
import http.client
import os
import time
import urllib.error
import urllib.request

import pytest
from botocore.exceptions import ClientError, ResponseStreamingError

BUCKET = "harness"


@pytest.fixture(scope="module")
def uploaded(s3_server, tmp_path_factory):
    """{key: bytes} of a small tree uploaded under harness/ds/."""
    root = tmp_path_factory.mktemp("tree")
    files = {"a.bin": os.urandom(100_000), "sub/b.bin": os.urandom(3_000), "sub/deeper/c.txt": b"hello s3\n"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    keys = s3_server.upload_dir(root, BUCKET, "ds/")
    assert keys == sorted(f"ds/{rel}" for rel in files)
    return {f"ds/{rel}": data for rel, data in files.items()}


def test_upload_list_and_ranged_get(s3_server, uploaded):
    client = s3_server.client(retries=0)
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix="ds/")
    assert {o["Key"]: o["Size"] for o in listed["Contents"]} == {k: len(v) for k, v in uploaded.items()}
    data = uploaded["ds/a.bin"]
    got = client.get_object(Bucket=BUCKET, Key="ds/a.bin", Range="bytes=1000-1999")
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == f"bytes 1000-1999/{len(data)}"
    assert got["Body"].read() == data[1000:2000]
    whole = client.get_object(Bucket=BUCKET, Key="ds/a.bin")
    assert whole["Body"].read() == data
    assert whole["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'  # one PUT: the MD5
    # Upload again into an existing bucket, under no prefix.
    assert s3_server.upload_dir(s3_server.base / "nothing-here", BUCKET, "") == []


def test_signatures_are_checked(s3_server, uploaded):
    with pytest.raises(ClientError) as e:
        s3_server.client(retries=0, secret_key="not-the-secret").get_object(Bucket=BUCKET, Key="ds/a.bin")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    # Unsigned (anonymous) requests are refused too.
    with pytest.raises(urllib.error.HTTPError) as anon:
        urllib.request.urlopen(f"{s3_server.endpoint}/{BUCKET}/ds/a.bin", timeout=10)
    assert anon.value.code == 403


def test_env_names_the_server_and_drops_other_credentials(s3_server, monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "someone-else")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    env = s3_server.env()
    assert "AWS_PROFILE" not in env and "AWS_SESSION_TOKEN" not in env
    assert env["AWS_ENDPOINT_URL"] == s3_server.endpoint
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], env["AWS_REGION"]) == (
        s3_server.access_key, s3_server.secret_key, "us-east-1")
    assert env["PATH"] == os.environ["PATH"]
    s3_server.apply_env(monkeypatch, endpoint="http://127.0.0.1:1")
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:1" and "AWS_PROFILE" not in os.environ


def test_proxy_forwards_signed_requests_unchanged(s3_server, s3_proxy, uploaded):
    proxy = s3_proxy()
    client = proxy.client(retries=0)
    data = uploaded["ds/sub/b.bin"]
    assert client.get_object(Bucket=BUCKET, Key="ds/sub/b.bin", Range="bytes=10-209")["Body"].read() == data[10:210]
    assert client.get_object(Bucket=BUCKET, Key="ds/sub/b.bin")["Body"].read() == data
    client.put_object(Bucket=BUCKET, Key="via-proxy", Body=b"x" * 5000)  # a body, and Expect: 100-continue
    assert client.get_object(Bucket=BUCKET, Key="via-proxy")["Body"].read() == b"x" * 5000
    # The client signed for the proxy's host:port; SeaweedFS checked that Host and accepted it.
    assert {r.headers["host"] for r in proxy.requests} == {f"127.0.0.1:{proxy.port}"}
    assert [r.status for r in proxy.requests] == [206, 200, 200, 200]
    assert proxy.stats()["requests"] == 4 and proxy.stats()["slowdown"] == 0
    assert proxy.env()["AWS_ENDPOINT_URL"] == proxy.endpoint


def test_proxy_slowdown(s3_server, s3_proxy, uploaded):
    proxy = s3_proxy(slowdown=1.0)
    client = proxy.client(retries=0)
    with pytest.raises(ClientError) as e:
        client.get_object(Bucket=BUCKET, Key="ds/a.bin")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert e.value.response["Error"]["Code"] == "SlowDown"
    assert proxy.stats() == {"requests": 1, "eligible": 1, "delayed": 0, "slowdown": 1, "reset": 0, "short_body": 0}
    # Off again at run time; a forced fault for the next GET only.
    proxy.configure(slowdown=0.0).fail_next("slowdown")
    with pytest.raises(ClientError):
        client.get_object(Bucket=BUCKET, Key="ds/a.bin")
    assert client.get_object(Bucket=BUCKET, Key="ds/a.bin")["Body"].read() == uploaded["ds/a.bin"]
    assert [r.status for r in proxy.requests] == [503, 503, 200]


def _raw_get(proxy, s3_server, key):
    """A signed GET through the proxy with http.client: (status, Content-Length, body or the exception)."""
    url = proxy.client().generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=60)
    conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=10)
    conn.request("GET", url[len(proxy.endpoint):])
    resp = conn.getresponse()
    try:
        body = resp.read()
    except (http.client.IncompleteRead, ConnectionResetError) as e:
        body = e
    conn.close()
    return resp.status, int(resp.getheader("Content-Length")), body


@pytest.mark.parametrize("fault", ["reset", "short_body"])
def test_proxy_cuts_bodies(s3_server, s3_proxy, uploaded, fault):
    data = uploaded["ds/a.bin"]
    proxy = s3_proxy(**{fault: 1.0})
    status, length, body = _raw_get(proxy, s3_server, "ds/a.bin")
    assert (status, length) == (200, len(data))
    if fault == "short_body":  # half the body, then a clean end: the reader sees too few bytes
        assert isinstance(body, http.client.IncompleteRead) and body.partial == data[: len(data) // 2]
    else:  # a TCP reset mid-body
        assert isinstance(body, ConnectionResetError)
    with pytest.raises(ResponseStreamingError):  # what boto3 sees: the body ended early
        proxy.client(retries=0).get_object(Bucket=BUCKET, Key="ds/a.bin")["Body"].read()
    assert proxy.stats()[fault] == 2


def test_proxy_draws_are_seeded(s3_server, s3_proxy, uploaded):
    def faults(seed):
        proxy = s3_proxy(seed=seed, slowdown=0.5, match=r"/ds/sub/")
        client = proxy.client(retries=0)
        client.list_objects_v2(Bucket=BUCKET, Prefix="ds/")  # not matched: never a fault
        for _ in range(16):
            try:
                client.get_object(Bucket=BUCKET, Key="ds/sub/deeper/c.txt")["Body"].read()
            except ClientError:
                pass
        assert proxy.stats()["eligible"] == 16 and proxy.requests[0].fault is None
        return [r.fault for r in proxy.requests]

    first = faults(7)
    assert first == faults(7) != faults(8)
    assert 0 < first.count("slowdown") < 16


def test_proxy_delay(s3_server, s3_proxy, uploaded):
    proxy = s3_proxy(delay_ms=300)
    client = proxy.client(retries=0)
    t0 = time.monotonic()
    assert client.get_object(Bucket=BUCKET, Key="ds/sub/deeper/c.txt")["Body"].read() == b"hello s3\n"
    assert time.monotonic() - t0 >= 0.3
    assert proxy.stats()["delayed"] == 1
