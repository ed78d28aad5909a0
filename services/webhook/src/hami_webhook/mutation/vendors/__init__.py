"""Each non-NVIDIA vendor's admission rules (HAMi's ``MutateAdmission`` per vendor), pure.

:class:`~hami_webhook.mutation.vendors.rule_set.VendorRuleSet` is built once from the device
config and the enabled vendor rows; :func:`~hami_webhook.mutation.vendors.apply.mutate_container`
applies every vendor's rule to one container (editing it in place), collects what the pod itself
must get (:class:`~hami_webhook.mutation.vendors.rule_set.PodEdits`: annotations, a runtime
class) and says whether the container asks for any of these vendors' devices.  A request a vendor
refuses raises :class:`~hami_webhook.mutation.vendors.rule_set.VendorRuleError` with HAMi's
words.

Modules: ``rule_set`` (what the rules depend on, what they ask of the pod, their error),
``apply`` (every rule over one container), and one module per vendor (contract §1 "Webhook",
HAMi's ``pkg/device/<vendor>``), each docstring stating its rule: ``ascend``, ``iluvatar``,
``mthreads``, ``kunlun``, ``metax_sgpu``, ``awsneuron``, ``enflame``.

Resources are read from limits, then requests (HAMi reads most of these from limits only).
"""
