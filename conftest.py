"""Suite-wide test settings: the hypothesis profiles.

``default`` is the everyday profile of ``make test``: few examples, so the property tests stay a
small share of the run, drawn afresh each run so that running the suite keeps exploring (two
decoder bugs were found that way).  ``ci`` is the thorough one CI selects
(``HYPOTHESIS_PROFILE=ci``, see ``.ci/run``): many more examples, derandomized so that a CI run
is reproducible and passes or fails the same way every time; a failure prints the blob that
reproduces it.  Neither has
a wall-clock deadline: on shared 2-core machines a deadline makes property tests flaky, not
stricter.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=50
)
settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    max_examples=400,
    derandomize=True,
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
