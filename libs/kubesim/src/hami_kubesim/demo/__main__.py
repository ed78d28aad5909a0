"""``python -m hami_kubesim.demo``: see :mod:`hami_kubesim.demo.cli`."""

import sys

from hami_kubesim.demo.cli import main

sys.exit(main())
