"""Documents in one DynamoDB table: partition key `c` (the collection), sort key `k` (the key), the document as
JSON text in `d`. A collection is one partition, so key order and `key_prefix` are DynamoDB's own (a Query with
begins_with, in UTF-8 byte order like SQLite's). Filters, ordering and pages run in stores/scanned.py, on the pages
DynamoDB returns: a query without `order_by` stops reading once it has `limit` matches; one with `order_by`
reads the collection's matching documents once (a registry's collections are small; the store keeps no index).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

from agent_env.errors import BadInput
from agent_env.stores.aws import error_code, refused
from agent_env.stores.base import Document, check_collection
from agent_env.stores.scanned import ScannedDocumentStore

Wire = dict[str, Any]  # an item or a request as boto3 sends it (DynamoDB's attribute-value form)


class DynamoDocumentStore(ScannedDocumentStore):
    def __init__(self, client: Any, table: str, *, create_table: bool = True) -> None:
        self.client = client
        self.table = table
        self._ensure_table(create_table)

    def _ensure_table(self, create: bool) -> None:
        try:
            status = self.client.describe_table(TableName=self.table)["Table"]["TableStatus"]
        except ClientError as e:
            if error_code(e) != "ResourceNotFoundException":
                raise refused(e, f"reading the DynamoDB table {self.table!r}") from None
            if not create:
                raise BadInput(
                    f"the DynamoDB table {self.table!r} does not exist",
                    "create it (partition key `c`, sort key `k`, both strings) or set create_table = true",
                ) from None
            status = self._create_table()
        if status != "ACTIVE":
            self.client.get_waiter("table_exists").wait(TableName=self.table, WaiterConfig={"Delay": 1})

    def _create_table(self) -> str:
        try:
            self.client.create_table(
                TableName=self.table,
                KeySchema=[{"AttributeName": "c", "KeyType": "HASH"}, {"AttributeName": "k", "KeyType": "RANGE"}],
                AttributeDefinitions=[
                    {"AttributeName": "c", "AttributeType": "S"},
                    {"AttributeName": "k", "AttributeType": "S"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
        except ClientError as e:
            if error_code(e) != "ResourceInUseException":  # another install created it first: wait for theirs
                raise refused(e, f"creating the DynamoDB table {self.table!r}") from None
        return "CREATING"

    def _item(self, collection: str, key: str, doc: Document) -> Wire:
        return {
            "c": {"S": check_collection(collection)},
            "k": {"S": _check_key(key)},
            "d": {"S": json.dumps(doc, default=str)},
        }

    def put(self, collection: str, key: str, doc: Document) -> None:
        try:
            self.client.put_item(TableName=self.table, Item=self._item(collection, key, doc))
        except ClientError as e:
            raise refused(e, f"storing {collection}/{key}") from None

    def create(self, collection: str, key: str, doc: Document) -> bool:
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._item(collection, key, doc),
                ConditionExpression="attribute_not_exists(k)",
            )
            return True
        except ClientError as e:
            if error_code(e) == "ConditionalCheckFailedException":
                return False
            raise refused(e, f"creating {collection}/{key}") from None

    def get(self, collection: str, key: str) -> Document | None:
        item = self.client.get_item(TableName=self.table, Key=self._key(collection, key), ConsistentRead=True)
        return json.loads(item["Item"]["d"]["S"]) if "Item" in item else None

    def delete(self, collection: str, key: str) -> bool:
        gone = self.client.delete_item(TableName=self.table, Key=self._key(collection, key), ReturnValues="ALL_OLD")
        return "Attributes" in gone

    def _key(self, collection: str, key: str) -> Wire:
        return {"c": {"S": check_collection(collection)}, "k": {"S": _check_key(key)}}

    def _scan(
        self, collection: str, key_prefix: str | None, descending: bool, after_key: str | None
    ) -> Iterator[tuple[str, Document]]:
        """(key, doc) of a collection in key order, read a page (up to 1 MB) at a time."""
        condition = "c = :c"
        values: Wire = {":c": {"S": check_collection(collection)}}
        if key_prefix:
            condition += " AND begins_with(k, :p)"
            values[":p"] = {"S": key_prefix}
        request: Wire = {
            "TableName": self.table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
            "ScanIndexForward": not descending,
        }
        if after_key is not None:
            request["ExclusiveStartKey"] = {"c": values[":c"], "k": {"S": after_key}}
        for page in self.client.get_paginator("query").paginate(**request):
            for item in page["Items"]:
                yield item["k"]["S"], json.loads(item["d"]["S"])


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not key or len(key.encode()) > 1024:
        raise BadInput(f"document key {key!r} must be 1 to 1024 bytes", "use keys like a run id or 'name@version'")
    return key
