"""``resource.k8s.io/v1`` (Dynamic Resource Allocation) as kube-apiserver stores it:
ResourceSlice, DeviceClass, ResourceClaim (with its ``status`` subresource) and
ResourceClaimTemplate, plus the pod fields that refer to claims.

Sources: ``pkg/apis/resource/validation/validation.go`` (messages), ``pkg/apis/resource/v1/
defaults.go`` and ``pkg/registry/resource/*/strategy.go`` (generation, status resets), and
``pkg/apis/core/validation`` for ``spec.resourceClaims`` and ``resources.claims``.  Pure code;
:mod:`.strategy` is what the object store calls.
"""
