"""A boto3 client for the test S3 server (moto's, started by the `s3_endpoint` fixture), and
what the store's own S3 client sends it."""

import boto3
import botocore.config


def s3_client(endpoint: str, *, retries: bool = True):
    """`retries`: botocore's as configured; else each request is made once, and a fault
    reaches the caller."""
    config = None if retries else botocore.config.Config(retries={"total_max_attempts": 1})
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=config,
    )


def sent_requests(objects) -> list:
    """The HTTP requests `objects`' S3 client sends from now on, as botocore built them."""
    sent: list = []
    events = objects._client.meta.events
    events.register("before-send.s3", lambda request, **_: sent.append(request))
    return sent
