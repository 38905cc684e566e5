"""S3 endpoints resolved once per bucket: the rule set's unread parameters left out."""

from support.s3 import sent_requests

from remotelog.segmentstore.s3_endpoints import unread_parameters

RULESET = {
    "parameters": {"Bucket": {}, "Region": {}, "Endpoint": {}, "Key": {}, "Prefix": {}},
    "rules": [
        {
            "conditions": [{"fn": "isSet", "argv": [{"ref": "Endpoint"}]}],
            "endpoint": {"url": "{url#scheme}://{Region}.example/{Bucket}"},
            "type": "endpoint",
        }
    ],
}


def test_parameters_read_by_reference_or_template_are_kept():
    assert unread_parameters(RULESET) == {"Key", "Prefix"}


def test_a_rule_that_reads_a_key_keeps_it():
    by_ref = {**RULESET, "rules": [*RULESET["rules"], {"argv": [{"ref": "Key"}]}]}
    assert unread_parameters(by_ref) == {"Prefix"}
    in_template = {**RULESET, "rules": [*RULESET["rules"], {"url": "https://x/{Prefix}"}]}
    assert unread_parameters(in_template) == {"Key"}


async def test_puts_of_many_keys_resolve_the_endpoint_once(s3_objects, s3_endpoint):
    objects = s3_objects
    sent = sent_requests(objects)
    resolve = objects._client._ruleset_resolver._provider.resolve_endpoint
    await objects.put("t/0/first", b"x")
    resolved = resolve.cache_info().misses
    for n in range(10):
        await objects.put(f"t/0/{n}", b"x")
    assert resolve.cache_info().misses == resolved
    keys = ["first", *range(10)]
    assert [r.url for r in sent] == [f"{s3_endpoint}/{objects.bucket}/t/0/{k}" for k in keys]
