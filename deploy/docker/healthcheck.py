"""Container HEALTHCHECK: exit 0 when ``$HAMI_HEALTHCHECK_URL`` answers 2xx, else 1.

Standard library only, so it runs in every image without extra packages.  The URL is an image
default (each service's plain-HTTP ``/healthz``) that a deployment overrides when it moves a port.
"""

import os
import sys
import urllib.error
import urllib.request

url = os.environ.get("HAMI_HEALTHCHECK_URL", "")
if not url:
    sys.exit(0)
try:
    with urllib.request.urlopen(url, timeout=3) as response:
        sys.exit(0 if 200 <= response.status < 300 else 1)
except (urllib.error.URLError, OSError):
    sys.exit(1)
