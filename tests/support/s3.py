"""A boto3 client for the test S3 server (moto's, started by the `s3_endpoint` fixture)."""

import boto3


def s3_client(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
