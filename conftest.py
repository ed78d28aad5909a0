"""Suite-wide test settings."""

from hypothesis import HealthCheck, settings

# Shared 2-core machines: wall-clock deadlines would make property tests flaky, not stricter.
settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=200
)
settings.load_profile("default")
