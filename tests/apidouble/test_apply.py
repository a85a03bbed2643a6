"""Server-side apply as Helm v4 uses it, and impersonation as ``kubectl --as`` uses it.

Sources: KEP-555 (apply creates, sets the configuration's fields, removes what the same manager
applied before and dropped; fieldManager required), filters/impersonation.go (1.20).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from vgpu_guard.apidouble import RunningDouble, serve_double
from vgpu_guard.apidouble.identity import UserInfo

from .test_clients import call

APPLY = {"Content-Type": "application/apply-patch+yaml"}
CM = "/api/v1/namespaces/default/configmaps/tiny"


def config(**data: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tiny"}, "data": data})


async def test_apply_creates_then_updates_and_drops_what_the_manager_no_longer_sets(
    double: RunningDouble,
) -> None:
    status, _, body = await call(
        double, "PATCH", CM + "?fieldManager=helm", data=config(a="1", b="2"), headers=APPLY
    )
    assert status == 201, body
    # Another writer's field survives the next apply; the manager's dropped field goes.
    patch = {"data": {"other": "x"}}
    merge = {"Content-Type": "application/merge-patch+json"}
    status, _, _ = await call(double, "PATCH", CM, data=json.dumps(patch), headers=merge)
    assert status == 200
    status, _, body = await call(
        double, "PATCH", CM + "?fieldManager=helm&force=true", data=config(b="3"), headers=APPLY
    )
    assert status == 200, body
    assert json.loads(body)["data"] == {"b": "3", "other": "x"}


async def test_apply_needs_a_field_manager(double: RunningDouble) -> None:
    status, _, body = await call(double, "PATCH", CM, data=config(a="1"), headers=APPLY)
    assert status == 422
    assert json.loads(body)["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )


async def test_apply_configurations_that_do_not_fit_are_bad_requests(double: RunningDouble) -> None:
    cases = {
        "[1, 2]": "the apply configuration must be a ConfigMap object",
        json.dumps({"kind": "Secret", "metadata": {"name": "tiny"}}): (
            'the apply configuration\'s kind "Secret" is not "ConfigMap"'
        ),
        json.dumps({"kind": "ConfigMap", "metadata": {"name": "other"}}): (
            "the apply configuration's metadata.name does not match the URL's \"tiny\""
        ),
    }
    for sent, message in cases.items():
        status, _, body = await call(double, "PATCH", CM + "?fieldManager=helm", data=sent, headers=APPLY)
        assert (status, json.loads(body)["message"]) == (400, message)


async def test_apply_to_a_subresource_is_refused_by_name(double: RunningDouble) -> None:
    status, _, body = await call(
        double, "PATCH", "/api/v1/namespaces/default/pods/p/status?fieldManager=x", data="{}", headers=APPLY
    )
    assert status == 415
    assert json.loads(body)["message"] == (
        "the API double does not serve server-side apply to pods/status: use application/merge-patch+json "
        "or application/json-patch+json"
    )


async def review_as(api: RunningDouble, token: str, headers: dict[str, str]) -> tuple[int, Any]:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods"}},
    }
    sent = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers}
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            api.url + "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            data=json.dumps(review),
            headers=sent,
            ssl=api.ssl_context(),
        ) as r,
    ):
        text = await r.text()
        return r.status, json.loads(text) if r.content_type == "application/json" else text


async def test_impersonation_is_authorized_and_reviews_the_impersonated_user(tmp_path: Any) -> None:
    async with serve_double(tmp_path, rbac=True) as api:
        sa = {"Impersonate-User": "system:serviceaccount:default:default"}
        status, body = await review_as(api, api.admin_token, sa)
        assert (status, body["status"]) == (201, {"allowed": False})
        # Someone without the impersonate verb is refused, naming what was impersonated.
        bob = api.token_for(UserInfo("bob"))
        status, body = await review_as(api, bob, sa)
        assert status == 403
        assert body["message"] == (
            'serviceaccounts "default" is forbidden: User "bob" cannot impersonate resource "serviceaccounts" '
            'in API group "" in the namespace "default"'
        )
        status, body = await review_as(api, bob, {"Impersonate-User": "alice"})
        assert status == 403 and body["message"].startswith(
            'users "alice" is forbidden: User "bob" cannot impersonate'
        )
        # A group without a user: the filter's plain-text InternalError.
        status, body = await review_as(api, api.admin_token, {"Impersonate-Group": "devs"})
        assert (status, body) == (
            500,
            'Internal Server Error: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews": requested '
            "[{Group  devs    }] without impersonating a user\n",
        )
        # The admin impersonating system:masters is allowed everything.
        masters = {"Impersonate-User": "carol", "Impersonate-Group": "system:masters"}
        status, body = await review_as(api, api.admin_token, masters)
        assert (status, body["status"]["allowed"]) == (201, True)
