# SPDX-License-Identifier: Apache-2.0
"""Credentials rotated under a running loader (a session token renewed in
~/.aws/credentials by a refresher, as long training jobs on temporary
credentials need): when the server refuses the ones a request was signed with,
dlfeed reads them again and goes on with the new ones; when they did not change,
the error says so. The server (SeaweedFS) knows both keys; the fault-injecting
proxy answers 400 ExpiredToken, as AWS does for an expired token, to requests
signed with a key it is told has expired."""
import sys

import numpy as np
import pytest

import dlfeed
from py_datasets import assert_every_row, epoch_by_id
from s3_harness import ACCESS_KEY, ACCESS_KEY_2, AWS_ENV_REMOVED, SECRET_KEY, SECRET_KEY_2

pytestmark = pytest.mark.skipif(not getattr(dlfeed._dlfeed, "has_s3", False),
                                reason="dlfeed built without libcurl (dlfeed::s3)")


@pytest.fixture(scope="module")
def rotating(s3_server, tmp_path_factory):
    base = tmp_path_factory.mktemp("rotate")
    x = np.arange(24 * 64, dtype=np.float32).reshape(24, 64)
    for f in range(4):
        np.save(base / f"x_{f}.npy", x[f * 6:(f + 1) * 6])
    s3_server.upload_dir(base, "rotate", "npy/")
    return "s3://rotate/npy/", x


def use_profile_file(monkeypatch, s3_server, endpoint, path, key, secret):
    for k in (*AWS_ENV_REMOVED, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k, raising=False)
    path.write_text(f"[default]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(path))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(path.parent / "no-config"))
    monkeypatch.setenv("AWS_REGION", s3_server.region)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def signed_with(proxy, key):
    return [r for r in proxy.requests if f"Credential={key}/" in r.headers.get("authorization", "")]


def test_credentials_rotated_in_the_profile_file_are_read_again(s3_server, s3_proxy, rotating, tmp_path,
                                                                monkeypatch):
    url, x = rotating
    proxy = s3_proxy()
    creds = tmp_path / "credentials"
    use_profile_file(monkeypatch, s3_server, proxy.endpoint, creds, ACCESS_KEY, SECRET_KEY)
    monkeypatch.setenv("DLFEED_S3_CONNECTIONS", "2")  # each connection finds the new key once, then keeps it
    loader = dlfeed.Loader(url, batch_size=4, resident="off", strategy="global_shuffle", seed=3)
    got = epoch_by_id(loader, 0)
    assert_every_row(got, x)
    # The refresher writes the new key; the old one expires at the server.
    use_profile_file(monkeypatch, s3_server, proxy.endpoint, creds, ACCESS_KEY_2, SECRET_KEY_2)
    proxy.configure(expired_keys=(ACCESS_KEY,))
    proxy.reset_stats()
    before = dlfeed._dlfeed.s3_stats()
    got = epoch_by_id(loader, 1)
    assert_every_row(got, x)
    after = dlfeed._dlfeed.s3_stats()
    refused = signed_with(proxy, ACCESS_KEY)
    assert 1 <= len(refused) <= 2 and all(r.status == 400 for r in refused), "each connection: refused once"
    assert all(r.status in (200, 206) for r in signed_with(proxy, ACCESS_KEY_2))
    assert after["credentials_reread"] - before["credentials_reread"] == len(refused)
    assert after["failures"] == before["failures"]
    proxy.reset_stats()
    got = epoch_by_id(loader, 2)
    assert_every_row(got, x)
    assert not signed_with(proxy, ACCESS_KEY) and signed_with(proxy, ACCESS_KEY_2), "the new key kept"
    loader.close()


def test_credentials_refused_and_not_rotated_are_a_clear_error(s3_server, s3_proxy, rotating, tmp_path,
                                                               monkeypatch):
    url, _ = rotating
    proxy = s3_proxy()
    use_profile_file(monkeypatch, s3_server, proxy.endpoint, tmp_path / "credentials", ACCESS_KEY, SECRET_KEY)
    loader = dlfeed.Loader(url, batch_size=4, resident="off")
    epoch_by_id(loader, 0)
    proxy.configure(expired_keys=(ACCESS_KEY,))
    with pytest.raises(Exception, match=r"(?s)s3://rotate/npy/x_\d\.npy.*ExpiredToken.*read again, are the same"):
        epoch_by_id(loader, 1)
    # Rotated to a key that is refused too.
    use_profile_file(monkeypatch, s3_server, proxy.endpoint, tmp_path / "credentials", ACCESS_KEY_2, SECRET_KEY_2)
    proxy.configure(expired_keys=(ACCESS_KEY, ACCESS_KEY_2))
    with pytest.raises(Exception, match=r"(?s)ExpiredToken.*read again \(from profile default of .*credentials\) and "
                                        r"refused too"):
        epoch_by_id(loader, 2)
    loader.close()


def use_credential_process(monkeypatch, s3_server, endpoint, tmp_path, keys_file, expiration="2999-01-01T00:00:00Z"):
    """A profile whose credentials a credential_process prints (as `aws configure
    export-credentials --format process` or an SSO helper would): here a Python
    script that prints the key pair in `keys_file` and counts its runs."""
    for k in (*AWS_ENV_REMOVED, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k, raising=False)
    script = tmp_path / "creds helper.py"
    script.write_text(
        "import json, sys\n"
        "key, secret = open(sys.argv[1]).read().split()\n"
        "open(sys.argv[1] + '.runs', 'a').write('run\\n')\n"
        "print(json.dumps({'Version': 1, 'AccessKeyId': key, 'SecretAccessKey': secret,\n"
        f"                  'Expiration': {expiration!r}}}))\n")
    config = tmp_path / "config"
    config.write_text(f"[profile trainer]\ncredential_process = {sys.executable} '{script}' {keys_file}\n")
    monkeypatch.setenv("AWS_PROFILE", "trainer")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_REGION", s3_server.region)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    return lambda: len(open(f"{keys_file}.runs").read().split())


def test_a_credential_process_signs_the_requests_and_runs_again_when_refused(s3_server, s3_proxy, rotating,
                                                                             tmp_path, monkeypatch):
    url, x = rotating
    proxy = s3_proxy()
    keys = tmp_path / "keys"
    keys.write_text(f"{ACCESS_KEY} {SECRET_KEY}")
    runs = use_credential_process(monkeypatch, s3_server, proxy.endpoint, tmp_path, keys)
    monkeypatch.setenv("DLFEED_S3_CONNECTIONS", "2")
    loader = dlfeed.Loader(url, batch_size=4, resident="off", strategy="global_shuffle", seed=3)
    assert_every_row(epoch_by_id(loader, 0), x)
    assert runs() == 1, "run once for the process, not per connection or request"
    assert signed_with(proxy, ACCESS_KEY) and not signed_with(proxy, ACCESS_KEY_2)
    # The helper now gives the new key; the old one expires at the server.
    keys.write_text(f"{ACCESS_KEY_2} {SECRET_KEY_2}")
    proxy.configure(expired_keys=(ACCESS_KEY,))
    proxy.reset_stats()
    assert_every_row(epoch_by_id(loader, 1), x)
    assert runs() == 2, "run again once: the second connection refused takes the first's new key"
    assert 1 <= len(signed_with(proxy, ACCESS_KEY)) <= 2
    proxy.reset_stats()
    assert_every_row(epoch_by_id(loader, 2), x)
    assert not signed_with(proxy, ACCESS_KEY) and signed_with(proxy, ACCESS_KEY_2)
    loader.close()


def test_a_failing_credential_process_is_a_clear_error(s3_server, tmp_path, monkeypatch):
    runs = use_credential_process(monkeypatch, s3_server, s3_server.endpoint, tmp_path, tmp_path / "absent")
    with pytest.raises(Exception, match=r"(?s)credential_process of profile trainer in .*config.*exited with 1.*"
                                        r"No such file"):
        dlfeed.Loader("s3://rotate/npy/", batch_size=4)
    with pytest.raises(FileNotFoundError):
        runs()


def test_credentials_near_their_expiration_are_renewed_before_a_request_is_refused(s3_server, s3_proxy, rotating,
                                                                                tmp_path, monkeypatch):
    """Credentials a credential_process gave that expire within 5 minutes are read again before requests
    are signed with them (at most every 2 s): the new key signs the next epoch's requests with none
    refused first."""
    import datetime
    import time
    url, x = rotating
    proxy = s3_proxy()
    keys = tmp_path / "keys"
    keys.write_text(f"{ACCESS_KEY} {SECRET_KEY}")
    soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    runs = use_credential_process(monkeypatch, s3_server, proxy.endpoint, tmp_path, keys, expiration=soon)
    loader = dlfeed.Loader(url, batch_size=4, resident="off", strategy="global_shuffle", seed=3)
    assert_every_row(epoch_by_id(loader, 0), x)
    keys.write_text(f"{ACCESS_KEY_2} {SECRET_KEY_2}")  # what the helper gives from now on
    time.sleep(2.2)
    proxy.reset_stats()
    before = dlfeed._dlfeed.s3_stats()
    assert_every_row(epoch_by_id(loader, 1), x)
    after = dlfeed._dlfeed.s3_stats()
    assert runs() >= 2
    assert signed_with(proxy, ACCESS_KEY_2) and all(r.status in (200, 206) for r in proxy.requests)
    assert after["credentials_reread"] == before["credentials_reread"], "renewed before any refusal"
    loader.close()
