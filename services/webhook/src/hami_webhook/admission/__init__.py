"""The HTTP side of the webhook: AdmissionReview requests in, replies out.

``review`` (pure) decodes ``admission.k8s.io/v1`` / ``v1beta1`` reviews and encodes replies;
``http`` (the I/O shell) serves them with aiohttp, calling the pure decision in
:mod:`hami_webhook.mutation.admit` and, for ``/webhook/dra``, the template writer.
"""
