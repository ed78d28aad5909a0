"""Fits and node scores of the vendors whose rules differ from HAMi's standard loop.

One module per vendor, each a set of pure functions over the same types as
:func:`~hami_scheduler.core.fit.fit_request`::

    fit(devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext)
        -> FitResult

``devices`` are the vendor's devices on one node, already in GPU-policy order (the loops that
walk them do so from the end, as HAMi does); a failure carries HAMi's reason text
(:func:`~hami_scheduler.core.reasons.format_reasons`).  Vendors with a node score also expose a
``score`` whose signature each module documents.  Vendor-specific facts reach a fit through
:attr:`DeviceUsage.custom <hami_scheduler.core.usage.device.DeviceUsage.custom>` (the registration's
``custominfo``) or through the keyword-only arguments a module names; the dispatch that picks a
module by vendor word lives outside this package.
"""
