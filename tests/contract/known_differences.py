"""Where the API double differs from the real API server on purpose: probe test name -> why.

Everything not listed here must agree (tests/contract/conftest.py: ``Contract.agree``). An entry
whose probe no longer differs fails, so this list stays true. Keep each reason one sentence that
says why the double does not (or should not) do what the real server does.
"""

from __future__ import annotations

KNOWN: dict[str, str] = {
    # -- pods (tests/contract/test_pods.py) --
    "test_service_account_token_volume_source": (
        "version: since 1.22 the ServiceAccount admission plugin mounts the projected kube-api-access-* "
        "volume as the double (v1.33) does, where 1.20 mounts the token Secret default-token-*"
    ),
    "test_node_create_gets_the_not_ready_taint": (
        "the double has no node lifecycle controller to lift TaintNodesByCondition's not-ready taint once "
        "a node is Ready, so it does not add the taint (nodes the tests create would stay unschedulable)"
    ),
    "test_request_and_limit_mismatch_messages": (
        "version: later Kubernetes (and the double, v1.33) end these texts with the limit "
        '("must be equal to X limit of 3"), where 1.20 stops at "X limit"'
    ),
    "test_pod_spec_update_lists_what_may_change": (
        "version: the double (v1.33) lists what 1.33 lets a pod update change (incl. "
        "terminationGracePeriodSeconds from negative to 1), in 1.33's wording, where 1.20 lists fewer"
    ),
    "test_binding_with_a_wrong_uid_precondition": (
        "version: later Kubernetes (and the double, v1.33) keep a Binding's metadata.uid as a precondition "
        "(409 Conflict), where 1.20 wipes it on create and binds the pod"
    ),
    "test_create_request_of_a_pod_sent_without_a_namespace": (
        "version: since 1.24 (kubernetes#94637) the API server sets metadata.namespace before admission, "
        "so mutating webhooks see it as the double (v1.33) sends it, where 1.20 leaves it empty"
    ),
    "test_match_conditions_on_create": (
        "version: matchConditions are GA since 1.30 and the double (v1.33) keeps and evaluates them, "
        "where 1.20 does not know the field, drops it and calls the webhook"
    ),
    "test_a_denied_update_is_sent_to_the_webhook_again": (
        "version: 1.20 retries an update that failed against its cached object, so a denial calls every "
        "webhook twice, which 1.23 stopped (kubernetes#104182) and the double (v1.33) does not do"
    ),
    "test_namespace_selector_on_the_namespace_name_label": (
        "version: since 1.21 every namespace carries kubernetes.io/metadata.name, as in the double "
        "(v1.33), so a namespaceSelector on it matches, where 1.20 namespaces have no such label"
    ),
    "test_crd_max_length_and_max_items_texts": (
        "version: later releases report maxLength and maxItems as TooLong/TooMany ('Too long: may not be "
        "more than 3 bytes', 'Too many: 2: must have at most 1 items') as the double (v1.33) does, where "
        "1.20 says 'should be at most 3 chars long' / 'should have at most 1 items'"
    ),
    "test_crd_array_item_errors_name_the_item": (
        "version: kube-openapi names an array item's error by its index (spec.tags[1]) as the double "
        "(v1.33) does, where 1.20's go-openapi reports it on the array (spec.tags)"
    ),
    "test_crd_empty_string_is_not_null": (
        "version: 1.20's go-openapi takes an empty string for null ('must be of type string: \"null\"'), "
        "which later releases (data == nil only) and the double (v1.33) do not"
    ),
    # -- clients (tests/contract/test_clients.py) --
    "test_protobuf_with_a_json_alternative_is_answered_in_json": (
        "the double serves JSON only: it answers with the JSON alternative the Accept names, where 1.20 "
        "answers built-in kinds in protobuf (kubectl's fidelity is proven on the real control plane)"
    ),
    "test_builtin_singular_names": (
        "version: since 1.27 discovery fills singularName for built-in resources (pod, node) as the "
        "double (v1.33) does, where 1.20 leaves it empty"
    ),
}
