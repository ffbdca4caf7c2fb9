"""Documents in one DynamoDB table: partition key `c` (the collection), sort key `k` (the key), the document as
JSON text in `d`. A collection is one partition, so key order and `key_prefix` are DynamoDB's own (a Query with
begins_with, in UTF-8 byte order like SQLite's). Filters and ordering on dotted fields run here, on the pages
DynamoDB returns: a query without `order_by` stops reading once it has `limit` matches; one with `order_by`
reads the collection's matching documents once (a registry's collections are small; the store keeps no index).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from botocore.exceptions import ClientError

from agentenv.errors import BadInput
from agentenv.stores.aws import error_code, refused
from agentenv.stores.base import (
    DocumentStore,
    Page,
    check_collection,
    check_field,
    check_limit,
    check_where,
    field_value,
    make_cursor,
    query_shape,
    read_cursor,
)


class DynamoDocumentStore(DocumentStore):
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

    def _item(self, collection: str, key: str, doc: dict[str, Any]) -> dict[str, Any]:
        return {
            "c": {"S": check_collection(collection)},
            "k": {"S": _check_key(key)},
            "d": {"S": json.dumps(doc, default=str)},
        }

    def put(self, collection: str, key: str, doc: dict[str, Any]) -> None:
        try:
            self.client.put_item(TableName=self.table, Item=self._item(collection, key, doc))
        except ClientError as e:
            raise refused(e, f"storing {collection}/{key}") from None

    def create(self, collection: str, key: str, doc: dict[str, Any]) -> bool:
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

    def get(self, collection: str, key: str) -> dict[str, Any] | None:
        item = self.client.get_item(TableName=self.table, Key=self._key(collection, key), ConsistentRead=True)
        return json.loads(item["Item"]["d"]["S"]) if "Item" in item else None

    def delete(self, collection: str, key: str) -> bool:
        gone = self.client.delete_item(TableName=self.table, Key=self._key(collection, key), ReturnValues="ALL_OLD")
        return "Attributes" in gone

    def _key(self, collection: str, key: str) -> dict[str, Any]:
        return {"c": {"S": check_collection(collection)}, "k": {"S": _check_key(key)}}

    def query(
        self,
        collection: str,
        *,
        where: dict[str, Any] | None = None,
        key_prefix: str | None = None,
        order_by: str | None = None,
        descending: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        if limit is not None and limit < 0:
            raise ValueError(f"limit {limit!r} must not be negative")
        docs = [doc for _, doc in self._ordered(collection, where, key_prefix, order_by, descending, limit)]
        return docs if limit is None else docs[:limit]

    def page(
        self,
        collection: str,
        *,
        where: dict[str, Any] | None = None,
        key_prefix: str | None = None,
        order_by: str | None = None,
        descending: bool = False,
        limit: int = 100,
        after: str | None = None,
    ) -> Page:
        """The cursor is the last document's position (its key, and its `order_by` value): the next page starts
        right after it, so documents added or removed meanwhile neither repeat nor hide the ones that follow."""
        limit = check_limit(limit)
        shape = query_shape(collection, where, key_prefix, order_by, descending)
        start = _position(read_cursor(after, shape)) if after else None
        found: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        for position, doc in self._ordered(collection, where, key_prefix, order_by, descending, None, start):
            found.append((position, doc))
            if len(found) > limit:
                break
        more = len(found) > limit
        items = found[:limit]
        return Page(items=[doc for _, doc in items], next=make_cursor(shape, list(items[-1][0])) if more else None)

    def _ordered(
        self,
        collection: str,
        where: dict[str, Any] | None,
        key_prefix: str | None,
        order_by: str | None,
        descending: bool,
        limit: int | None,
        after: tuple[Any, ...] | None = None,
    ) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
        """(position, doc) in the query's order, strictly after `after`. A position is (key,) without
        `order_by`, else (rank, value, key): a total order, the same on every page and every backend."""
        where = check_where(where)
        if order_by is None:
            start = after[0] if after else None
            matches = 0
            for key, doc in self._scan(collection, key_prefix, descending, start):
                if _matches(doc, where):
                    yield (key,), doc
                    matches += 1
                    if limit is not None and matches >= limit:
                        return
            return
        check_field(order_by)
        rows = [
            ((*_sortable(field_value(doc, order_by)), key), doc)
            for key, doc in self._scan(collection, key_prefix, False, None)
            if _matches(doc, where)
        ]
        rows.sort(key=lambda row: row[0], reverse=descending)
        for position, doc in rows:
            if after is None or (position < after if descending else position > after):
                yield position, doc

    def _scan(
        self, collection: str, key_prefix: str | None, descending: bool, after_key: str | None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(key, doc) of a collection in key order, read a page (up to 1 MB) at a time."""
        condition = "c = :c"
        values: dict[str, Any] = {":c": {"S": check_collection(collection)}}
        if key_prefix:
            condition += " AND begins_with(k, :p)"
            values[":p"] = {"S": key_prefix}
        request: dict[str, Any] = {
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


def _matches(doc: dict[str, Any], where: dict[str, Any]) -> bool:
    for field, wanted in where.items():
        value = field_value(doc, field)
        # JSON booleans and numbers compare as SQLite's json_extract does: true == 1; a string never equals a number
        if isinstance(value, str) != isinstance(wanted, str) or value != wanted:
            return False
    return True


def _sortable(value: Any) -> tuple[int, Any]:
    """Mixed types order as in SQLite: missing/null, then numbers (booleans as 0/1), then text."""
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, float(value) if isinstance(value, float) else int(value))
    if isinstance(value, str):
        return (2, value)
    return (2, json.dumps(value, separators=(",", ":")))  # objects and arrays compare as their JSON text


def _position(raw: Any) -> tuple[Any, ...]:
    """A cursor's position, checked to be one this store made: [key] or [rank, value, key]."""
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
        return (raw[0],)
    if isinstance(raw, list) and len(raw) == 3 and isinstance(raw[0], int) and isinstance(raw[2], str):
        rank, value = raw[0], raw[1]
        expected = {0: int, 1: int | float, 2: str}.get(rank)
        if expected is not None and isinstance(value, expected) and not isinstance(value, bool):
            return (rank, value, raw[2])
    raise ValueError("page cursor is malformed: pass back the `next` of the previous page")
