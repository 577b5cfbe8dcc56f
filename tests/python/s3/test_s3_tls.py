# SPDX-License-Identifier: Apache-2.0
"""HTTPS to an S3 server with a CA of its own (MinIO, Ceph or SeaweedFS on a lab's
certificate), as AWS's tools take it: AWS_CA_BUNDLE, or the profile's ca_bundle, names a
PEM file of the CAs to trust. The server is the harness's SeaweedFS on its HTTPS port,
with a certificate openssl made for 127.0.0.1."""
import numpy as np
import pytest

import dlfeed
from py_datasets import assert_every_row, epoch_by_id

pytestmark = pytest.mark.skipif(not getattr(dlfeed._dlfeed, "has_s3", False),
                                reason="dlfeed built without libcurl (dlfeed::s3)")


@pytest.fixture(scope="module")
def tls_data(s3_server, tmp_path_factory):
    base = tmp_path_factory.mktemp("tls")
    x = np.arange(12 * 32, dtype=np.int64).reshape(12, 32)
    for f in range(3):
        np.save(base / f"x_{f}.npy", x[f * 4:(f + 1) * 4])
    s3_server.upload_dir(base, "tls", "npy/")
    return "s3://tls/npy/", x


def read_all(url):
    loader = dlfeed.Loader(url, batch_size=5, resident="off")
    got = epoch_by_id(loader, 0)
    loader.close()
    return got


def test_https_with_the_servers_ca_in_aws_ca_bundle(s3_server, tls_data, monkeypatch):
    s3_server.apply_env(monkeypatch, endpoint=s3_server.https_endpoint)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(s3_server.ca_file))
    url, x = tls_data
    assert_every_row(read_all(url), x)


def test_https_with_the_profiles_ca_bundle(s3_server, tls_data, monkeypatch, tmp_path):
    s3_server.apply_env(monkeypatch, endpoint=s3_server.https_endpoint)
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    config = tmp_path / "config"
    config.write_text(f"[default]\nca_bundle = {s3_server.ca_file}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    url, x = tls_data
    assert_every_row(read_all(url), x)


def test_https_without_the_ca_is_a_clear_error(s3_server, tls_data, monkeypatch, tmp_path):
    """The system's CAs do not know the server's: the error says so and names the way out."""
    s3_server.apply_env(monkeypatch, endpoint=s3_server.https_endpoint)
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(Exception, match=r"(?s)s3://tls/npy/.*certificate.*the CAs trusted are .*AWS_CA_BUNDLE"):
        read_all(tls_data[0])


def test_a_ca_bundle_that_is_not_there_is_a_clear_error(s3_server, tls_data, monkeypatch, tmp_path):
    s3_server.apply_env(monkeypatch, endpoint=s3_server.https_endpoint)
    missing = tmp_path / "no-such-ca.pem"
    monkeypatch.setenv("AWS_CA_BUNDLE", str(missing))
    with pytest.raises(Exception, match=f"AWS_CA_BUNDLE names {missing}, which cannot be read"):
        read_all(tls_data[0])
    # Over plain HTTP no CA file is read: one the environment names for other tools is no error.
    s3_server.apply_env(monkeypatch)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(missing))
    assert sorted(read_all(tls_data[0])) == list(range(12))
