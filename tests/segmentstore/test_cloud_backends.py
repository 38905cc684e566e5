"""What the GCS and Azure backends do beyond the contract every backend holds
(test_object_store_contract.py): GCS's compose past 32 parts, their settings and
credentials as `config check` and the store refuse them, secrets kept out of output."""

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from aiohttp import web
from support.services import cloud_config, new_bucket, service_account_key, store_config
from support.waiting import eventually

from remotelog.cli.main import main
from remotelog.core.errors import InvalidArgumentError, UnsupportedOperationError
from remotelog.dev.broker import free_port
from remotelog.segmentstore.azure import AzureStore
from remotelog.segmentstore.factory import open_backend, open_segment_store
from remotelog.segmentstore.gcs import STAGING
from remotelog.segmentstore.gcs_signing import ServiceAccountSigner

KIB = 1024
STAMP = "2026-12-01T10:00:00.000Z"


async def test_gcs_composes_an_upload_of_more_parts_than_one_compose_takes(
    tmp_path, cloud_emulators
):
    """40 parts of 256 KiB: composed 32 at a time, then the intermediates; the object is
    the bytes in order, and no part or intermediate object is left."""
    config = cloud_config(
        "gcs", tmp_path, cloud_emulators, **{"storage.gcs.upload.part.size": str(256 * KIB)}
    )
    objects = await open_backend(config, config.backoff())
    data = os.urandom(40 * 256 * KIB - 1000)
    upload = objects.open_upload("t/0/log")
    for position in range(0, len(data), 100 * KIB):
        await upload.write(data[position : position + 100 * KIB])
    assert await upload.complete() == len(data)
    assert await objects.get("t/0/log") == data
    bucket = config.gcs_bucket_name
    assert cloud_emulators.objects("gcs", bucket) == {"t/0/log": len(data)}
    await objects.close()


async def test_gcs_lists_no_part_object_as_an_object(tmp_path, cloud_emulators):
    config = cloud_config("gcs", tmp_path, cloud_emulators)
    objects = await open_backend(config, config.backoff())
    upload = objects.open_upload("t/0/log")
    await upload.write(os.urandom(6 * 1024 * KIB))  # past the 5 MiB part: one part sent
    await objects.put("t/0/index", b"i")

    async def part_sent():
        return [u.key async for u in objects.incomplete_uploads("t/0/")] == ["t/0/log"]

    # Asked of the emulator (one request at a time) only once the part is there.
    await eventually(part_sent)
    stored = cloud_emulators.objects("gcs", config.gcs_bucket_name)
    assert [key for key in stored if STAGING in key] != []
    assert [o.key async for o in objects.list("t/0/")] == ["t/0/index"]
    await upload.abort()
    assert cloud_emulators.objects("gcs", config.gcs_bucket_name) == {"t/0/index": 1}
    await objects.close()


async def test_an_azure_upload_is_blocks_uncommitted_until_complete(tmp_path, cloud_emulators):
    config = cloud_config("azure", tmp_path, cloud_emulators)
    container = config.azure_container_name
    objects = await open_backend(config, config.backoff())
    data = os.urandom(12 * 1024 * KIB)
    upload = objects.open_upload("t/0/log")
    await upload.write(data)  # two 5 MiB blocks being staged, 2 MiB pending
    await eventually(lambda: cloud_emulators.azurite.incomplete_uploads(container) == ["t/0/log"])
    assert cloud_emulators.objects("azure", container) == {}
    assert await upload.complete() == len(data)
    assert cloud_emulators.azurite.incomplete_uploads(container) == []
    across = 5 * 1024 * KIB - 2  # a read across the first two blocks' boundary
    chunks = [bytes(c) async for c in objects.read("t/0/log", across, across + 9, 4)]
    assert chunks == [data[across + i : across + min(i + 4, 10)] for i in (0, 4, 8)]
    await objects.close()


async def test_azure_listings_go_on_page_after_page(tmp_path, cloud_emulators):
    config = cloud_config("azure", tmp_path, cloud_emulators)
    objects = await open_backend(config, config.backoff())
    paged = AzureStore(replace(objects.settings, list_page_size=2), objects._service, None)
    upload = paged.open_upload("t/0/orphan")
    await upload.write(os.urandom(6 * 1024 * KIB))
    await upload.sent()
    keys = [f"t/0/{i}" for i in range(7)]
    for key in keys:
        await paged.put(key, key.encode())
    assert [o.key async for o in paged.list("t/0/")] == keys  # four pages
    assert [u.key async for u in paged.incomplete_uploads("t/")] == ["t/0/orphan"]
    await upload.abort()
    await objects.close()


@pytest.mark.parametrize(
    ("backend", "missing"),
    [("gcs", "storage.gcs.bucket.name"), ("azure", "storage.azure.container.name")],
)
async def test_a_cloud_store_without_its_bucket_is_refused_naming_the_setting(
    tmp_path, cloud_emulators, backend, missing
):
    config = cloud_config(backend, tmp_path, cloud_emulators, **{missing: ""})
    with pytest.raises(InvalidArgumentError) as refused:
        await open_segment_store(config, config.backoff())
    assert refused.value.field == missing


async def test_azure_without_an_account_or_connection_string_is_refused(tmp_path, cloud_emulators):
    config = cloud_config(
        "azure", tmp_path, cloud_emulators, **{"storage.azure.connection.string": ""}
    )
    with pytest.raises(InvalidArgumentError) as refused:
        await open_backend(config, config.backoff())
    assert refused.value.field == "storage.azure.account.name"


def check(tmp_path, capsys, *lines: str) -> tuple[int, str, str]:
    path = tmp_path / "store.properties"
    path.write_text("".join(f"{line}\n" for line in lines))
    code = main(["config", "check", "--service", "segment-store", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_config_check_names_an_unreadable_gcs_key_file(tmp_path, capsys):
    missing = tmp_path / "nope.json"
    code, _, err = check(
        tmp_path,
        capsys,
        "storage.backend=gcs",
        "storage.gcs.bucket.name=b",
        f"storage.gcs.credentials.path={missing}",
    )
    assert code == 2
    assert "storage.gcs.credentials.path" in err
    assert f"cannot read {missing}" in err


def test_config_check_names_a_gcs_key_that_is_no_service_account_key(tmp_path, capsys):
    code, _, err = check(tmp_path, capsys, "storage.gcs.credentials.json={not json")
    assert code == 2
    assert "storage.gcs.credentials.json" in err
    assert "{not json" not in err  # a secret's value is never printed


def test_config_check_shows_no_azure_secret(tmp_path, capsys):
    secrets = {
        "storage.azure.account.key": "S3cr3tAccountKey==",
        "storage.azure.sas.token": "sv=2024&sig=S3cr3tSig",
        "storage.azure.connection.string": "AccountName=a;AccountKey=S3cr3tConn==",
    }
    code, out, err = check(
        tmp_path,
        capsys,
        "storage.backend=azure",
        "storage.azure.container.name=c",
        *(f"{key}={value}" for key, value in secrets.items()),
    )
    assert code == 0
    for key, value in secrets.items():
        assert key in out
        assert value not in out + err


async def test_s3_without_keys_takes_a_web_identity_as_irsa_hands_it_out(
    tmp_path, s3_endpoint, monkeypatch
):
    """EKS's IRSA (and any OIDC federation) gives a pod a token file and a role: with no
    keys set, the store assumes the role with the token (STS: moto's) and signs with
    what STS answered."""
    token = tmp_path / "token"
    token.write_text("header.payload.signature")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    nowhere = str(tmp_path / "none")
    for name, value in {
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(token),
        "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/remotelog-store",
        "AWS_ROLE_SESSION_NAME": "remotelog-store",
        "AWS_ENDPOINT_URL_STS": s3_endpoint,
        "AWS_CONFIG_FILE": nowhere,
        "AWS_SHARED_CREDENTIALS_FILE": nowhere,
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    no_keys = {"storage.aws.access.key.id": "", "storage.aws.secret.access.key": ""}
    config = store_config("s3", tmp_path, s3_endpoint, new_bucket(s3_endpoint), **no_keys)
    objects = await open_backend(config, config.backoff())
    try:
        await objects.put("t/0/log", b"tiered")
        assert await objects.get("t/0/log") == b"tiered"
        credentials = objects._client._get_credentials()
        assert credentials.method == "assume-role-with-web-identity"
        frozen = await credentials.get_frozen_credentials()
        assert frozen.access_key.startswith("ASIA")  # STS's temporary keys
    finally:
        await objects.close()


async def test_gcs_listings_follow_next_page_tokens(tmp_path):
    """gcp-storage-emulator answers every listing in one page; GCS pages by
    nextPageToken. A server answering as GCS does, two objects a page, the first
    request refused 503 as GCS throttles, stands in for it."""
    asked: list[dict[str, str]] = []
    names = ["t/0/a", "t/0/b", "t/0/b/.remotelog-upload/u1/00001", "t/0/c"]

    async def objects(request: web.Request) -> web.Response:
        asked.append(dict(request.query))
        if len(asked) == 1:
            return web.Response(status=503, text="slow down")
        start = int(request.query.get("pageToken", "0"))
        page = {
            "items": [
                {"name": n, "size": "1", "updated": STAMP, "timeCreated": STAMP}
                for n in names[start : start + 2]
            ]
        }
        if start + 2 < len(names):
            page["nextPageToken"] = str(start + 2)
        return web.json_response(page)

    app = web.Application()
    app.router.add_get("/storage/v1/b/{bucket}/o", objects)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    properties = {
        "storage.gcs.bucket.name": "paged",
        "storage.gcs.endpoint.url": f"http://127.0.0.1:{port}",
    }
    config = store_config("gcs", tmp_path, "", "", **properties)
    store = await open_backend(config, config.backoff())
    try:
        assert [o.key async for o in store.list("t/0/")] == ["t/0/a", "t/0/b", "t/0/c"]
        assert [u.upload_id async for u in store.incomplete_uploads("t/0/")] == ["u1"]
    finally:
        await store.close()
        await runner.cleanup()
    assert [a.get("pageToken") for a in asked[:3]] == [None, None, "2"]
    assert {a["prefix"] for a in asked} == {"t/0/"}


def http(method: str, url: str, **headers: str) -> tuple[int, bytes]:
    """(status, body) of one request by URL (a PUT sends a byte)."""
    body = b"x" if method == "PUT" else None
    request = urllib.request.Request(url, method=method, headers=headers, data=body)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, b""


async def test_an_azure_fetch_url_reads_its_one_blob_and_nothing_else(tmp_path, cloud_emulators):
    """Azurite checks a SAS as Azure does: the store's grants a read of one blob."""
    config = cloud_config("azure", tmp_path, cloud_emulators)
    objects = await open_backend(config, config.backoff())
    await objects.put("t/0/log", b"0123456789")
    await objects.put("t/0/other", b"other")
    url = await objects.presigned_get_url("t/0/log", 60)
    await objects.close()
    assert http("GET", url, Range="bytes=2-5") == (206, b"2345")
    assert http("PUT", url, **{"x-ms-blob-type": "BlockBlob"})[0] == 403  # read only
    assert http("DELETE", url)[0] == 403
    assert http("GET", url.replace("t/0/log", "t/0/other"))[0] == 403  # its blob only
    tampered = re.sub(r"sig=[^&]+", "sig=AAAA", url)
    assert http("GET", tampered)[0] == 403


async def test_a_gcs_fetch_url_is_signed_v4_by_the_service_account(tmp_path, cloud_emulators):
    config = cloud_config("gcs", tmp_path, cloud_emulators)
    objects = await open_backend(config, config.backoff())
    await objects.put("t/0/log", b"0123456789")
    url = await objects.presigned_get_url("t/0/log", 30 * 24 * 3600)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    assert query["X-Goog-Algorithm"] == "GOOG4-RSA-SHA256"
    assert query["X-Goog-Credential"].startswith("store@remotelog-test.iam.gserviceaccount.com/")
    assert query["X-Goog-Expires"] == str(7 * 24 * 3600)  # V4's longest
    emulator = urllib.parse.urlsplit(cloud_emulators.gcs.endpoint).netloc
    assert urllib.parse.urlsplit(url).netloc == emulator
    assert http("GET", url, Range="bytes=2-5") == (206, b"2345")
    # Without a key to sign with, a GCS store refuses to sign: its readers use the store.
    keyless = cloud_config("gcs", tmp_path, cloud_emulators, **{"storage.gcs.credentials.json": ""})
    unsigned = await open_backend(keyless, keyless.backoff())
    with pytest.raises(UnsupportedOperationError, match=r"storage\.gcs\.credentials"):
        await unsigned.presigned_get_url("t/0/log", 60)
    await unsigned.close()
    await objects.close()


@pytest.mark.parametrize(
    ("method", "key", "headers"),
    [
        ("GET", "orders-0/00000000000000000000-abc.log", {}),
        (
            "PUT",
            "orders-0/a b~c/.remotelog-upload/u1/00001",
            {"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="},
        ),
    ],
)
def test_gcs_v4_signatures_are_google_s_own(method, key, headers):
    """The emulator checks no signature: the store's V4 URLs are compared with Google's
    own library's for the same request, a Content-MD5 of mixed case signed as it is."""
    from google.cloud.storage._signing import generate_signed_url_v4
    from google.oauth2 import service_account

    info = json.loads(service_account_key())
    now = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
    signer = ServiceAccountSigner.of(info["client_email"], info["private_key"])
    ours = signer.signed_url(method, "b-1", key, 600, headers, now=now)
    theirs = generate_signed_url_v4(
        service_account.Credentials.from_service_account_info(info),
        urllib.parse.quote(f"/b-1/{key}", safe="/~"),
        expiration=600,
        method=method,
        headers=dict(headers),  # it adds its own to what it is given
        _request_timestamp=now.strftime("%Y%m%dT%H%M%SZ"),
    )
    ours_split, theirs_split = urllib.parse.urlsplit(ours), urllib.parse.urlsplit(theirs)
    assert (ours_split.netloc, ours_split.path) == (theirs_split.netloc, theirs_split.path)
    query = dict(urllib.parse.parse_qsl(ours_split.query))
    assert query == dict(urllib.parse.parse_qsl(theirs_split.query))
    assert query["X-Goog-SignedHeaders"] == ("content-md5;host" if headers else "host")
