"""KMS keys of the test S3 server (moto serves KMS beside S3 on one endpoint)."""

import boto3


def kms_key(endpoint: str) -> str:
    """The ARN of a new key."""
    client = boto3.client(
        "kms",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    return client.create_key(Description="remotelog test")["KeyMetadata"]["Arn"]


def aws_kms(endpoint: str, key_id: str) -> dict[str, str]:
    """A segment store's settings that encrypt new segments under `key_id` of that KMS."""
    return {
        "encryption.key.provider": "aws-kms",
        "encryption.kms.endpoint.url": endpoint,
        "encryption.key.id": key_id,
    }
