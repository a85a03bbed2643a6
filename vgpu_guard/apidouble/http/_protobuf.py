"""Protocol buffers' wire format, by hand: the places the double meets protobuf.

kubectl asks ``/openapi/v2`` for gnostic's protobuf only (``_openapi_pb`` encodes it);
``kubectl auth can-i`` sends its SelfSubjectAccessReview and Helm its release Secrets as
``application/vnd.kubernetes.protobuf`` (decoded here; other kinds' protobuf bodies are refused).
No code generator is needed: the encoding is varints and length-delimited fields
(https://protobuf.dev/programming-guides/encoding/), and the field numbers are the messages'
``.proto`` files in the Kubernetes 1.20.2 source.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

__all__ = [
    "DECODERS",
    "ProtobufError",
    "decode_k8s",
    "fields",
    "k8s_unwrap",
    "tag_bytes",
    "tag_double",
    "tag_varint",
]

# k8s.io/apimachinery/pkg/runtime/serializer/protobuf: every object starts with these four bytes,
# then a runtime.Unknown (typeMeta 1 {apiVersion 1, kind 2}, raw 2, contentEncoding 3, contentType 4).
K8S_MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    """Bytes that are not the message they claim to be."""


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s are ten-byte two's complement
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def tag_varint(number: int, value: int) -> bytes:
    """A varint field (int64, bool); proto3 leaves zero out."""
    return _varint(number << 3) + _varint(value) if value else b""


def tag_double(number: int, value: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", value) if value else b""


def tag_bytes(number: int, value: bytes | str) -> bytes:
    """A length-delimited field (string, bytes, embedded message)."""
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs: varints as int, length-delimited as bytes, fixed as bytes."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
            yield number, value
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise ProtobufError("truncated field")
            yield number, data[pos : pos + size]
            pos += size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(data):
                raise ProtobufError("truncated field")
            yield number, data[pos : pos + size]
            pos += size
        else:
            raise ProtobufError(f"unsupported wire type {wire}")


def k8s_unwrap(data: bytes) -> tuple[str, str, bytes]:
    """The envelope of a Kubernetes protobuf body: (apiVersion, kind, the object's bytes)."""
    if not data.startswith(K8S_MAGIC):
        raise ProtobufError("the body does not start with the k8s protobuf prefix")
    api_version = kind = ""
    raw = b""
    for number, value in fields(data[len(K8S_MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            for sub, text in fields(value):
                if sub == 1 and isinstance(text, bytes):
                    api_version = text.decode()
                elif sub == 2 and isinstance(text, bytes):
                    kind = text.decode()
        elif number == 2 and isinstance(value, bytes):
            raw = value
    return api_version, kind, raw


def _strings_of(data: bytes, names: dict[int, str]) -> dict[str, str]:
    """A message of optional strings, as JSON shows it (empty ones omitted)."""
    out: dict[str, str] = {}
    for number, value in fields(data):
        if number in names and isinstance(value, bytes) and value:
            out[names[number]] = value.decode()
    return out


_RESOURCE_ATTRIBUTES = {
    1: "namespace",
    2: "verb",
    3: "group",
    4: "version",
    5: "resource",
    6: "subresource",
    7: "name",
}


def decode_self_subject_access_review(api_version: str, kind: str, raw: bytes) -> dict[str, object]:
    """authorization/v1 SelfSubjectAccessReview (generated.proto: metadata 1, spec 2
    {resourceAttributes 1, nonResourceAttributes 2 {path 1, verb 2}})."""
    spec: dict[str, object] = {}
    for number, value in fields(raw):
        if number != 2 or not isinstance(value, bytes):
            continue
        for sub, attrs in fields(value):
            if sub == 1 and isinstance(attrs, bytes):
                spec["resourceAttributes"] = _strings_of(attrs, _RESOURCE_ATTRIBUTES)
            elif sub == 2 and isinstance(attrs, bytes):
                spec["nonResourceAttributes"] = _strings_of(attrs, {1: "path", 2: "verb"})
    return {"apiVersion": api_version, "kind": kind, "spec": spec}


def _map_entry(data: bytes) -> tuple[str, bytes]:
    key, value = "", b""
    for number, part in fields(data):
        if number == 1 and isinstance(part, bytes):
            key = part.decode()
        elif number == 2 and isinstance(part, bytes):
            value = part
    return key, value


def _time(data: bytes) -> str:
    """meta/v1 Time {seconds 1} as RFC 3339, the JSON form."""
    seconds = next((v for n, v in fields(data) if n == 1 and isinstance(v, int)), 0)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_META_STRINGS = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
_OWNER_STRINGS = {5: "apiVersion", 1: "kind", 3: "name", 4: "uid"}


def _object_meta(data: bytes) -> dict[str, object]:
    """meta/v1 ObjectMeta (generated.proto) as JSON shows it; managedFields are not decoded."""
    meta: dict[str, object] = {}
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    finalizers: list[str] = []
    owners: list[dict[str, object]] = []
    for number, value in fields(data):
        if number in _META_STRINGS and isinstance(value, bytes) and value:
            meta[_META_STRINGS[number]] = value.decode()
        elif number in (7, 10) and isinstance(value, int):
            meta["generation" if number == 7 else "deletionGracePeriodSeconds"] = value
        elif number in (8, 9) and isinstance(value, bytes):
            meta["creationTimestamp" if number == 8 else "deletionTimestamp"] = _time(value)
        elif number in (11, 12) and isinstance(value, bytes):
            key, text = _map_entry(value)
            (labels if number == 11 else annotations)[key] = text.decode()
        elif number == 13 and isinstance(value, bytes):
            owner: dict[str, object] = dict(_strings_of(value, _OWNER_STRINGS))
            for sub, flag in fields(value):
                if sub in (6, 7) and isinstance(flag, int):
                    owner["controller" if sub == 6 else "blockOwnerDeletion"] = bool(flag)
            owners.append(owner)
        elif number == 14 and isinstance(value, bytes):
            finalizers.append(value.decode())
    for key, items in (("labels", labels), ("annotations", annotations), ("finalizers", finalizers)):
        if items:
            meta[key] = items
    if owners:
        meta["ownerReferences"] = owners
    return meta


def decode_secret(api_version: str, kind: str, raw: bytes) -> dict[str, object]:
    """core/v1 Secret (metadata 1, data 2, type 3, stringData 4, immutable 5): Helm's release
    storage writes Secrets this way."""
    secret: dict[str, object] = {"apiVersion": api_version or "v1", "kind": kind or "Secret"}
    payload: dict[str, str] = {}
    plain: dict[str, str] = {}
    for number, value in fields(raw):
        if number == 1 and isinstance(value, bytes):
            secret["metadata"] = _object_meta(value)
        elif number == 2 and isinstance(value, bytes):
            key, blob = _map_entry(value)
            payload[key] = base64.b64encode(blob).decode()
        elif number == 3 and isinstance(value, bytes):
            secret["type"] = value.decode()
        elif number == 4 and isinstance(value, bytes):
            key, text = _map_entry(value)
            plain[key] = text.decode()
        elif number == 5 and isinstance(value, int):
            secret["immutable"] = bool(value)
    if payload:
        secret["data"] = payload
    if plain:
        secret["stringData"] = plain
    return secret


def decode_delete_options(api_version: str, kind: str, raw: bytes) -> dict[str, object]:
    """meta/v1 DeleteOptions (gracePeriodSeconds 1, preconditions 2 {uid 1, resourceVersion 2},
    orphanDependents 3, propagationPolicy 4, dryRun 5): Helm deletes with it."""
    options: dict[str, object] = {"apiVersion": api_version or "v1", "kind": kind or "DeleteOptions"}
    dry_run: list[str] = []
    for number, value in fields(raw):
        if number == 1 and isinstance(value, int):
            options["gracePeriodSeconds"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 2 and isinstance(value, bytes):
            options["preconditions"] = _strings_of(value, {1: "uid", 2: "resourceVersion"})
        elif number == 3 and isinstance(value, int):
            options["orphanDependents"] = bool(value)
        elif number == 4 and isinstance(value, bytes):
            options["propagationPolicy"] = value.decode()
        elif number == 5 and isinstance(value, bytes):
            dry_run.append(value.decode())
    if dry_run:
        options["dryRun"] = dry_run
    return options


Decoder = Callable[[str, str, bytes], dict[str, object]]
DECODERS: dict[str, Decoder] = {
    "Secret": decode_secret,
    "SelfSubjectAccessReview": decode_self_subject_access_review,
    "DeleteOptions": decode_delete_options,
}


def decode_k8s(data: bytes) -> dict[str, object] | None:
    """The object of a Kubernetes protobuf body as JSON; None for a kind the double does not decode."""
    api_version, kind, raw = k8s_unwrap(data)
    decoder = DECODERS.get(kind)
    return None if decoder is None else decoder(api_version, kind, raw)
