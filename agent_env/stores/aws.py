"""The AWS backends of the four stores: documents in DynamoDB, objects in S3, images in ECR, secrets in Secrets
Manager. Every install pointed at the same table, bucket, registry and secret prefix shares them.

boto3 (the `aws` extra) is imported here and in the `aws_*` modules only, when an AWS store opens. Credentials
come from AWS's standard chain (environment, profile, instance role); the config file names resources, never
keys (an `aws_secret_access_key` option may only be a `secret:NAME` reference). A store that cannot reach its
endpoint, or finds no credentials, fails with a BadInput naming the address and the fix, not a traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionError, NoCredentialsError

from agent_env.errors import BadInput
from agent_env.spec.secret_refs import is_reference
from agent_env.stores.base import Options
from agent_env.stores.secrets import FileSecretStore

if TYPE_CHECKING:
    from agent_env.config import Settings

# Options every AWS store takes; each kind adds its own (see OPTIONS).
COMMON = {"region", "endpoint_url", "aws_access_key_id", "aws_secret_access_key"}
OPTIONS = {
    "documents": {"table", "create_table"},
    "objects": {"bucket", "prefix"},
    "images": {"prefix"},
    "secrets": {"prefix"},
}
SERVICES = {"documents": "dynamodb", "objects": "s3", "images": "ecr", "secrets": "secretsmanager"}


def open_aws(kind: str, options: Options, settings: Settings) -> Any:
    """The `kind` store ("documents", "objects", "images" or "secrets") on AWS, from its `[stores.KIND]` options."""
    if kind not in OPTIONS:
        raise BadInput(f"AWS has no {kind!r} store", f"use one of: {', '.join(OPTIONS)}")
    unknown = sorted(set(options) - COMMON - OPTIONS[kind])
    if unknown:
        allowed = ", ".join(sorted(COMMON | OPTIONS[kind]))
        raise BadInput(f"[stores.{kind}] has unknown AWS option(s): {', '.join(unknown)}", f"use: {allowed}")
    client = make_client(SERVICES[kind], options, settings)
    if kind == "documents":
        from agent_env.stores.aws_documents import DynamoDocumentStore

        create = options.get("create_table", True)
        if not isinstance(create, bool):
            raise BadInput("[stores.documents] create_table must be true or false")
        return DynamoDocumentStore(client, str(options.get("table", "agentenv")), create_table=create)
    if kind == "objects":
        from agent_env.stores.aws_objects import S3ObjectStore

        if not options.get("bucket"):
            raise BadInput(
                "the AWS object store needs a bucket: [stores.objects] bucket is not set",
                'add `bucket = "NAME"` (an existing S3 bucket) under [stores.objects] in .agentenv/config.toml',
            )
        return S3ObjectStore(client, str(options["bucket"]), str(options.get("prefix", "")))
    if kind == "images":
        from agent_env.stores.aws_images import EcrImageStore

        return EcrImageStore(client, str(options.get("prefix", "agentenv/")))
    from agent_env.stores.aws_secrets import SecretsManagerStore

    return SecretsManagerStore(client, str(options.get("prefix", "agentenv/")))


def make_client(service: str, options: Options, settings: Settings) -> Any:
    """A boto3 client for `service`, whose connection and credential failures are BadInputs naming the fix."""
    session = boto3.session.Session(**_credentials(options, settings))
    region = options.get("region") or session.region_name or "us-east-1"
    client = session.client(
        service,
        region_name=region,
        endpoint_url=options.get("endpoint_url") or None,
        config=Config(
            retries={"mode": "standard", "max_attempts": 3},
            connect_timeout=5,
            read_timeout=60,
            # SigV4 everywhere, presigned grants too (`aws_grants`): it signs the expiry, method, key and headers
            **({"signature_version": "s3v4"} if service == "s3" else {}),
        ),
    )
    address = client.meta.endpoint_url

    def explain(exception: BaseException, **_: Any) -> None:
        """Runs when a call fails (after botocore's retries), on every path: plain calls, paginators, transfers."""
        if isinstance(exception, ConnectionError):
            raise BadInput(
                f"cannot reach AWS {service} at {address}",
                "check the network, and [stores] region / endpoint_url in .agentenv/config.toml",
            ) from exception
        if isinstance(exception, NoCredentialsError):
            raise BadInput(
                f"no AWS credentials for {service} at {address}",
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where an IAM role applies",
            ) from exception

    client.meta.events.register("after-call-error", explain)
    return client


def _credentials(options: Options, settings: Settings) -> dict[str, str]:
    """Explicit keys only when configured (the key id in the clear, the secret as a `secret:` reference)."""
    key_id, secret = options.get("aws_access_key_id"), options.get("aws_secret_access_key")
    if not key_id and not secret:
        return {}  # AWS's own chain
    if not (key_id and secret):
        raise BadInput(
            "aws_access_key_id and aws_secret_access_key come together",
            "set both, or neither to use AWS's standard credentials (environment, profile, role)",
        )
    if not is_reference(secret):
        raise BadInput(
            "aws_secret_access_key in the config file must be a reference, not the key itself",
            'store it with `agent-env secrets set NAME` and write aws_secret_access_key = "secret:NAME"',
        )
    return {  # from this install's own secrets (a file): the key to AWS cannot live in AWS
        "aws_access_key_id": str(key_id),
        "aws_secret_access_key": FileSecretStore(settings.state_dir).resolve(secret),
    }


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def refused(error: ClientError, what: str) -> BadInput:
    """An AWS refusal the user can act on (permissions, limits, a bad name), naming what was asked."""
    message = error.response.get("Error", {}).get("Message") or error_code(error)
    return BadInput(f"AWS refused {what}: {message}", "check the store's settings and the IAM permissions")
