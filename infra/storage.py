"""Storage: the metadata table (DynamoDB) and the document bucket (S3), both retained when the stack is deleted."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

# Everything the functions write lives under this prefix (see kindex.domain.keys.BLOB_ROOT).
BLOB_PREFIX = "tenants/"
TTL_ATTRIBUTE = "expires_at"
ATTENTION_INDEX = "attention"


class Storage(Construct):
    """DynamoDB on demand with PITR and a TTL attribute; S3 TLS-only, encrypted, versioned, private, access-logged.

    Versioning protects against accidental overwrites; noncurrent versions expire after a week so deleted
    documents do not linger (the ingest function also deletes the versions of a removed document).
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Metadata",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=TTL_ATTRIBUTE,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=RemovalPolicy.RETAIN,
        )
        # Sparse and keys-only: only documents that need the reindex's attention carry `attention` (see
        # kindex/adapters/aws/dynamodb_metadata.py), so a pass over a settled collection reads nothing from it.
        self.table.add_global_secondary_index(
            index_name=ATTENTION_INDEX,
            partition_key=dynamodb.Attribute(name="attention", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.KEYS_ONLY,
        )
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # the log delivery service only writes to SSE-S3 buckets
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,  # log delivery is granted by bucket policy
            lifecycle_rules=[s3.LifecycleRule(id="expire-access-logs", expiration=Duration.days(90))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.bucket = s3.Bucket(
            self,
            "Documents",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="documents/",
            lifecycle_rules=[
                s3.LifecycleRule(id="expire-noncurrent-versions", noncurrent_version_expiration=Duration.days(7)),
                s3.LifecycleRule(
                    id="abort-incomplete-uploads", abort_incomplete_multipart_upload_after=Duration.days(1)
                ),
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )

    def allow_browser_uploads(self, origin: str) -> None:
        """The web console (served by the API at /console) PUTs files to presigned URLs from the browser: CORS lets
        pages of `origin` (the stack's own API) do so, no other site, other accounts' API Gateway pages included.
        The signature still authorizes each PUT. The allowed headers are those the presigner signs and the console
        therefore sends (s3_blobs build_presign_params; Content-Length is the browser's own and never preflighted):
        a header missing here fails every browser upload at its preflight."""
        self.bucket.add_cors_rule(
            allowed_methods=[s3.HttpMethods.PUT],
            allowed_headers=["Content-Type", "x-amz-server-side-encryption", "If-None-Match"],
            allowed_origins=[origin],
            exposed_headers=["ETag"],
            max_age=3600,
        )

    def objects_arn(self) -> str:
        """ARN pattern of every object the functions may touch."""
        return self.bucket.arn_for_objects(BLOB_PREFIX + "*")
